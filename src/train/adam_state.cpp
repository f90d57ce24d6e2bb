#include "train/adam_state.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <memory>
#include <sstream>

#include "compat/libtorch.h"
#include "error.h"

namespace mlip::train {

std::string save_adam_state(const torch::optim::Adam& optimizer) {
  torch::serialize::OutputArchive archive(std::make_shared<torch::jit::CompilationUnit>());
  torch::serialize::OutputArchive states(archive.compilation_unit());
  torch::serialize::OutputArchive groups(archive.compilation_unit());
  const auto& param_groups = optimizer.param_groups();
  groups.write("param_groups/size", torch::tensor(int64_t(param_groups.size())));
  int64_t position = 0;
  for (size_t i = 0; i < param_groups.size(); ++i) {
    torch::serialize::OutputArchive group(archive.compilation_unit());
    const auto& params = param_groups[i].params();
    group.write("params/size", torch::tensor(int64_t(params.size())));
    for (size_t j = 0; j < params.size(); ++j) {
      const std::string key = std::to_string(position++);
      group.write("params/" + std::to_string(j), c10::IValue(key));
      const auto it = optimizer.state().find(compat::optimizer_state_key(params[j]));
      if (it == optimizer.state().end()) continue;
      const auto& st = static_cast<const torch::optim::AdamParamState&>(*it->second);
      torch::serialize::OutputArchive state(archive.compilation_unit());
      state.write("step", c10::IValue(int64_t(st.step())));
      state.write("exp_avg", c10::IValue(st.exp_avg().detach().cpu()));
      state.write("exp_avg_sq", c10::IValue(st.exp_avg_sq().detach().cpu()));
      states.write(key, state);
    }
    param_groups[i].options().serialize(group);
    groups.write("param_groups/" + std::to_string(i), group);
  }
  archive.write("pytorch_version", c10::IValue("1.5.0"));  // LibTorch's optimiser archive format
  archive.write("state", states);
  archive.write("param_groups", groups);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

namespace {

int64_t read_count(torch::serialize::InputArchive& archive, const std::string& key, const std::string& what) {
  at::Tensor count;
  archive.read(key, count);
  if (!count.defined() || count.numel() != 1) throw Error(what + ": optimizer state: " + key + " is not a count");
  return count.item<int64_t>();
}

at::Tensor read_moment(torch::serialize::InputArchive& state, const char* name, const at::Tensor& param,
                       const c10::Device& device, const std::string& what) {
  c10::IValue value;
  state.read(name, value);
  if (!value.isTensor()) throw Error(what + ": optimizer state: " + name + " is not a tensor");
  const at::Tensor moment = value.toTensor();
  if (moment.sizes() != param.sizes() || moment.scalar_type() != param.scalar_type()) {
    std::ostringstream msg;
    msg << what << ": optimizer state: " << name << " is a " << moment.scalar_type() << " tensor of shape "
        << moment.sizes() << ", but its parameter is a " << param.scalar_type() << " tensor of shape "
        << param.sizes();
    throw Error(msg.str());
  }
  return moment.to(device).contiguous();
}

}  // namespace

void load_adam_state(torch::optim::Adam& optimizer, const std::string& bytes, const c10::Device& device,
                     const std::string& what) {
  torch::serialize::InputArchive archive;
  torch::serialize::InputArchive states, groups;
  try {
    std::istringstream in(bytes);
    archive.load_from(in, c10::Device(c10::kCPU));
    archive.read("state", states);
    archive.read("param_groups", groups);
  } catch (const c10::Error& e) {
    throw Error(what + ": optimizer state: not a LibTorch optimiser archive (" + e.what_without_backtrace() + ")");
  }
  auto& param_groups = optimizer.param_groups();
  const int64_t group_count = read_count(groups, "param_groups/size", what);
  if (group_count != int64_t(param_groups.size()))
    throw Error(what + ": optimizer state has " + std::to_string(group_count) + " parameter group(s), the model " +
                std::to_string(param_groups.size()));
  auto& state_map = optimizer.state();
  state_map.clear();
  for (size_t i = 0; i < param_groups.size(); ++i) {
    torch::serialize::InputArchive group;
    groups.read("param_groups/" + std::to_string(i), group);
    const auto& params = param_groups[i].params();
    const int64_t count = read_count(group, "params/size", what);
    if (count != int64_t(params.size()))
      throw Error(what + ": optimizer state has " + std::to_string(count) + " parameters in group " +
                  std::to_string(i) + ", the model " + std::to_string(params.size()));
    for (size_t j = 0; j < params.size(); ++j) {
      c10::IValue key;
      group.read("params/" + std::to_string(j), key);
      if (!key.isString()) throw Error(what + ": optimizer state: the key of parameter " + std::to_string(j) + " is not text");
      torch::serialize::InputArchive state;
      if (!states.try_read(key.toStringRef(), state)) continue;  // never stepped
      c10::IValue step;
      state.read("step", step);
      auto fresh = std::make_unique<torch::optim::AdamParamState>();
      fresh->step(step.toInt());
      fresh->exp_avg(read_moment(state, "exp_avg", params[j], device, what));
      fresh->exp_avg_sq(read_moment(state, "exp_avg_sq", params[j], device, what));
      state_map[compat::optimizer_state_key(params[j])] = std::move(fresh);
    }
  }
}

}  // namespace mlip::train
