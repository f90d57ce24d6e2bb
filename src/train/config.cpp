#include "train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "error.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace mlip::train {

int64_t BatchSize::for_system(size_t index, int64_t natoms) const {
  switch (kind) {
    case Kind::kFixed:
      return value;
    case Kind::kList:
      if (index >= list.size()) {
        throw Error("batch_size: " + std::to_string(list.size()) + " entries for " +
                    std::to_string(index + 1) + " systems (one entry per system is needed)");
      }
      return list[index];
    case Kind::kAuto:
      if (natoms <= 0) {
        throw Error("batch_size: \"auto\" needs a positive number of atoms, got " +
                    std::to_string(natoms));
      }
      return std::max<int64_t>(1, (value + natoms - 1) / natoms);
  }
  return value;
}

namespace {

}  // namespace

using namespace mlip::input;

namespace {
// ---------------------------------------------------------------------------------------------
// Values with a syntax of their own

/// training_data.batch_size: a positive integer, a list of them, "auto" or "auto:N".
BatchSize to_batch_size(const YAML::Node& node, const std::string& path) {
  const std::string what = "a positive integer, a list of positive integers, or \"auto[:N]\"";
  BatchSize b;
  if (node.IsSequence()) {
    b.kind = BatchSize::Kind::kList;
    b.list = to_list<int64_t>(node, path, what, [](const YAML::Node& n, const std::string& p) {
      return to_integer(n, p, Bound::kPositive);
    });
    return b;
  }
  if (!node.IsScalar()) expected(path, what, node);
  const std::string& s = node.Scalar();
  int64_t v = 0;
  if (is_scalar(node) && parse_integer(s, v)) {
    if (v <= 0) expected(path, what, node);
    b.kind = BatchSize::Kind::kFixed;
    b.value = v;
  } else if (s == "auto") {
    b.kind = BatchSize::Kind::kAuto;
    b.value = 32;
  } else if (s.rfind("auto:", 0) == 0 && parse_integer(s.substr(5), v) && v > 0) {
    b.kind = BatchSize::Kind::kAuto;
    b.value = v;
  } else {
    expected(path, what, node);
  }
  return b;
}

/// Checks auto_prob: "prob_uniform", "prob_sys_size", or "prob_sys_size;a:b:w;..." with
/// 0 <= a < b <= nsys and w >= 0 (not all zero).
void check_auto_prob(const std::string& value, const std::string& path, size_t nsys) {
  if (value == "prob_uniform" || value == "prob_sys_size") return;
  const std::string syntax = "\"prob_sys_size\", \"prob_uniform\", or \"prob_sys_size;a:b:w;...\"";
  const std::string prefix = "prob_sys_size;";
  if (value.rfind(prefix, 0) != 0) fail(path, "expected " + syntax + ", got \"" + value + "\"");
  double total = 0;
  for (size_t begin = prefix.size(), end; begin <= value.size(); begin = end + 1) {
    end = std::min(value.find(';', begin), value.size());
    const std::string block = value.substr(begin, end - begin);
    static const std::regex kBlock("([0-9]+):([0-9]+):([^:]+)");
    std::smatch m;
    int64_t a = 0, b = 0;
    double w = 0;
    const bool ok = std::regex_match(block, m, kBlock) && parse_integer(m[1], a) &&
                    parse_integer(m[2], b) && parse_number(m[3], w);
    if (!ok || a >= b || b > int64_t(nsys) || w < 0) {
      fail(path, "block \"" + block + "\" of \"" + value +
                     "\": expected start:end:weight with integers 0 <= start < end <= " +
                     std::to_string(nsys) + " (the number of systems) and a weight >= 0");
    }
    total += w;
  }
  if (!(total > 0)) {
    fail(path, "expected " + syntax + " with a positive weight, got \"" + value + "\"");
  }
}

std::string resolve_system(const std::string& given, const std::string& input_dir) {
  fs::path p(given);
  if (p.is_relative() && !input_dir.empty()) p = fs::path(input_dir) / p;
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// ---------------------------------------------------------------------------------------------
// The sections


/// The registry entry the `model` section selects: `model.type` names it, or, for DeePMD's
/// standard model (type absent or "standard"), `model.descriptor.type` does (default
/// se_e2_a).

/// model: the common keys (type, type_map, data_stat_nbatch), then the model's own through
/// its registry entry.

void read_learning_rate(const Section& l, TrainConfig& c) {
  ExpLearningRate& lr = c.learning_rate;
  l.choice("type", "exp", {"exp"});
  lr.start_lr = l.number("start_lr", lr.start_lr);
  lr.stop_lr = l.number("stop_lr", lr.stop_lr);
  lr.decay_steps = l.integer("decay_steps", lr.decay_steps, Bound::kAny);
  if (l.has_value("decay_rate")) lr.decay_rate = l.number("decay_rate", 0.0, Bound::kPositive);
  lr.warmup_steps = l.integer("warmup_steps", lr.warmup_steps, Bound::kAny);
  lr.warmup_start_factor = l.number("warmup_start_factor", lr.warmup_start_factor);
  c.scale_by_worker = l.choice("scale_by_worker", c.scale_by_worker, {"linear", "sqrt", "none"});
}

void read_loss(const Section& l, TrainConfig& c) {
  l.choice("type", "ener", {"ener"});
  c.start_pref_e = l.number("start_pref_e", c.start_pref_e, Bound::kNonNegative);
  c.limit_pref_e = l.number("limit_pref_e", c.limit_pref_e, Bound::kNonNegative);
  c.start_pref_f = l.number("start_pref_f", c.start_pref_f, Bound::kNonNegative);
  c.limit_pref_f = l.number("limit_pref_f", c.limit_pref_f, Bound::kNonNegative);
  c.start_pref_v = l.number("start_pref_v", c.start_pref_v, Bound::kNonNegative);
  c.limit_pref_v = l.number("limit_pref_v", c.limit_pref_v, Bound::kNonNegative);
  c.start_pref_q = l.number("start_pref_q", c.start_pref_q, Bound::kNonNegative);
  c.limit_pref_q = l.number("limit_pref_q", c.limit_pref_q, Bound::kNonNegative);
  // Charge labels train the charges of model.long_range (docs/long_range.md "Charge labels").
  if ((c.start_pref_q > 0 || c.limit_pref_q > 0) && !c.model->long_range.enabled) {
    const std::string key = c.start_pref_q > 0 ? "start_pref_q" : "limit_pref_q";
    expected(l.path_of(key), "0 for a model without charges (the charge loss trains the charges of "
                             "model.long_range, which this model has not)", l.get(key));
  }
}

/// training_data / validation_data (the latter also reads numb_btch and single_rank).
DataConfig read_data(const Section& s, const std::string& input_dir, bool validation) {
  s.require({"systems"});
  DataConfig d;
  const YAML::Node systems = s.get("systems");
  const std::vector<std::string> given =
      systems.IsScalar() ? std::vector<std::string>{to_text(systems, s.path_of("systems"))}
                         : to_list<std::string>(systems, s.path_of("systems"),
                                                "a path or a non-empty list of paths", to_text);
  for (const auto& path : given) d.systems.push_back(resolve_system(path, input_dir));
  const std::string nsys = std::to_string(d.systems.size()) + " systems";

  if (s.has("batch_size")) {
    d.batch_size = to_batch_size(s.get("batch_size"), s.path_of("batch_size"));
  }
  if (d.batch_size.kind == BatchSize::Kind::kList && d.batch_size.list.size() != d.systems.size()) {
    fail(s.path_of("batch_size"),
         std::to_string(d.batch_size.list.size()) + " entries for " + nsys);
  }
  const std::string prob_key = s.current_or_old("auto_prob", "auto_prob_style");
  d.auto_prob = s.text(prob_key, d.auto_prob);
  check_auto_prob(d.auto_prob, s.path_of(prob_key), d.systems.size());
  d.sys_probs = s.numbers("sys_probs", Bound::kNonNegative);
  if (!d.sys_probs.empty()) {
    if (d.sys_probs.size() != d.systems.size()) {
      fail(s.path_of("sys_probs"), std::to_string(d.sys_probs.size()) + " entries for " + nsys);
    }
    if (std::all_of(d.sys_probs.begin(), d.sys_probs.end(), [](double p) { return p == 0; })) {
      expected(s.path_of("sys_probs"), "at least one positive probability", s.get("sys_probs"));
    }
  }
  // Where the files keep their labels (docs/data.md "Label keys"); empty: the default names.
  auto key = [&](const char* name) {
    const std::string value = s.text(name, "");
    if (s.has(name) && (value.empty() || value.find_first_of(" \t\"=") != std::string::npos))
      expected(s.path_of(name), "a key name (no spaces, quotes or '=')", s.get(name));
    return value;
  };
  d.keys.energy = key("energy_key");
  d.keys.forces = key("forces_key");
  d.keys.stress = key("stress_key");
  d.keys.virial = key("virial_key");
  d.keys.weight = key("weight_key");
  d.keys.charges = key("charges_key");
  if (validation) {
    d.numb_btch = s.integer("numb_btch", d.numb_btch);
    d.single_rank = s.flag("single_rank", d.single_rank);
    d.padded = s.flag("padded", d.padded);
    if (d.single_rank && d.padded)
      fail(s.path_of("padded"), "expected at most one of single_rank and padded to be true, got both");
  }
  return d;
}

void read_training(const Section& t, const std::string& input_dir, TrainConfig& c) {
  t.require({"training_data"});
  if (!t.get("training_data").IsMap()) {
    expected(t.path_of("training_data"), "a mapping", t.get("training_data"));
  }
  const std::string steps_key = t.current_or_old("numb_steps", "stop_batch");
  if (!t.has(steps_key)) fail(t.path_of("numb_steps"), "required key is missing");

  const std::vector<std::string> data_keys = {"systems",    "batch_size",  "auto_prob", "sys_probs",
                                              "energy_key", "forces_key", "stress_key", "virial_key", "weight_key",
                                              "charges_key"};
  c.training_data =
      read_data(t.section("training_data", data_keys, {"auto_prob_style"}), input_dir, false);
  if (t.has_value("validation_data")) {
    std::vector<std::string> keys = data_keys;
    keys.insert(keys.end(), {"numb_btch", "single_rank", "padded"});
    c.validation_data =
        read_data(t.section("validation_data", keys, {"auto_prob_style"}), input_dir, true);
    // Validation data kept as the training data is: its keys unless it names its own.
    if (c.validation_data->keys.defaults()) c.validation_data->keys = c.training_data.keys;
  }
  c.numb_steps = t.integer(steps_key, c.numb_steps);
  // MACE's config_type_weights: {config_type: weight >= 0}; types not named weigh 1.
  if (t.has_value("config_type_weights")) {
    const YAML::Node w = t.get("config_type_weights");
    if (!w.IsMap()) expected(t.path_of("config_type_weights"), "a mapping {config_type: weight}", w);
    for (const auto& kv : w) {
      const std::string name = kv.first.as<std::string>();
      double value = -1;
      if (!kv.second.IsScalar() || !YAML::convert<double>::decode(kv.second, value) || !std::isfinite(value) ||
          value < 0)
        expected(t.path_of("config_type_weights") + "." + name, "a number >= 0", kv.second);
      c.config_type_weights[name] = value;
    }
  }
  c.seed = t.seed("seed", c.seed);
  c.disp_file = t.text("disp_file", c.disp_file);
  c.disp_freq = t.integer("disp_freq", c.disp_freq);
  c.save_freq = t.integer("save_freq", c.save_freq);
  c.save_ckpt = t.text("save_ckpt", c.save_ckpt);
  c.max_ckpt_keep = t.integer("max_ckpt_keep", c.max_ckpt_keep);
  c.ema_decay = t.number("ema_decay", c.ema_decay);
  if (c.ema_decay < 0 || c.ema_decay >= 1) {
    expected(t.path_of("ema_decay"), "a number in [0, 1) (0 turns the moving average off)", t.get("ema_decay"));
  }
  c.device = t.text("device", c.device);
  if (!std::regex_match(c.device, std::regex("auto|cpu|cuda(:[0-9]+)?")))
    expected(t.path_of("device"), "auto, cpu, cuda or cuda:K", t.get("device"));
  if (t.has_value("cache_mb")) {
    const YAML::Node node = t.get("cache_mb");
    double mb = 0;
    if (node.IsScalar() && node.Scalar() == "all") {
      c.cache_mb = -1;
    } else if (node.IsScalar() && is_scalar(node) && parse_number(node.Scalar(), mb) && mb >= 0) {
      c.cache_mb = mb;
    } else {
      expected(t.path_of("cache_mb"), "a non-negative number of megabytes or \"all\"", node);
    }
  }
  if (t.has_value("data_workers")) {
    const YAML::Node node = t.get("data_workers");
    int64_t n = 0;
    if (node.IsScalar() && node.Scalar() == "auto") {
      c.data_workers = -1;
    } else if (node.IsScalar() && is_scalar(node) && parse_integer(node.Scalar(), n) && n >= 0 && n <= 64) {
      c.data_workers = n;
    } else {
      expected(t.path_of("data_workers"), "an integer in [0, 64] or \"auto\"", node);
    }
  }
  if (t.has_value("cuda_graphs")) {
    const YAML::Node node = t.get("cuda_graphs");
    const std::string value = node.IsScalar() ? node.Scalar() : "";
    if (value == "auto") c.cuda_graphs.reset();
    else if (value == "true" || value == "false") c.cuda_graphs = value == "true";
    else expected(t.path_of("cuda_graphs"), "true, false or \"auto\"", node);
  }
  t.flag("disp_training", true);
  t.flag("time_training", true);
  t.only_default("profiling", "false", is_false);
  t.only_default("tensorboard", "false", is_false);
}

void read_config(const YAML::Node& root, const std::string& input_dir, TrainConfig& c) {
  if (!root.IsMap()) {
    expected("", "a mapping with keys model, learning_rate, loss, training at the top level", root);
  }
  const Section top(root, "", {"model", "learning_rate", "loss", "training"});
  top.require({"model", "training"});
  for (const char* key : {"model", "training"}) {
    if (!top.get(key).IsMap()) expected(key, "a mapping", top.get(key));
  }
  c.model = models::read_model_section(top.get("model"));
  read_learning_rate(
      top.section("learning_rate", {"type", "start_lr", "stop_lr", "decay_steps", "decay_rate",
                                    "warmup_steps", "warmup_start_factor", "scale_by_worker"}),
      c);
  read_loss(top.section("loss", {"type", "start_pref_e", "limit_pref_e", "start_pref_f",
                                 "limit_pref_f", "start_pref_v", "limit_pref_v", "start_pref_q",
                                 "limit_pref_q"}),
            c);
  read_training(top.section("training",
                            {"training_data", "validation_data", "numb_steps", "seed", "disp_file",
                             "disp_freq", "save_freq", "save_ckpt", "max_ckpt_keep", "ema_decay", "device",
                             "cache_mb", "data_workers", "cuda_graphs", "disp_training", "time_training", "profiling",
                             "tensorboard",
                             "config_type_weights"},
                            {"stop_batch"}),
                input_dir, c);
  c.learning_rate.numb_steps = c.numb_steps;
  c.learning_rate.validate();
}

}  // namespace

TrainConfig parse_train_config(const std::string& text, const std::string& source,
                               const std::string& input_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    std::string where;
    if (!e.mark.is_null()) {
      where = ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    }
    throw Error(source + where + ": YAML syntax error: " + e.msg);
  }
  TrainConfig c;
  try {
    read_config(root, input_dir, c);
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  } catch (const YAML::Exception& e) {
    throw Error(source + ": " + e.msg);
  }
  c.input_dir = input_dir;
  c.input_text = text;
  return c;
}


TrainConfig load_train_config(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw Error(path + ": cannot read the training input (" + std::strerror(EISDIR) + ")");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw Error(path + ": cannot read the training input (" + std::strerror(err ? err : ENOENT) +
                ")");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read the training input (read failed)");
  std::string dir = fs::absolute(path, ec).parent_path().lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  TrainConfig c = parse_train_config(text.str(), path, dir);
  c.input_path = path;
  return c;
}

}  // namespace mlip::train
