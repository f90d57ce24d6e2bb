#include "models/pretrained_weights.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "error.h"
#include "models/finite_cast.h"

namespace mlip::models {
namespace {

std::string shape_text(const torch::Tensor& t) { return c10::str(t.sizes()); }

std::string joined(const std::vector<std::string>& names, size_t at_most) {
  std::string out;
  for (size_t k = 0; k < names.size() && k < at_most; ++k) out += (k ? ", " : "") + names[k];
  if (names.size() > at_most) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

/// One row's value for a message: "8" for a one-element row, its shape otherwise.
std::string value_text(const torch::Tensor& row) {
  if (row.numel() != 1) return "values of shape " + shape_text(row);
  return row.is_floating_point() ? c10::str(row.item<double>()) : std::to_string(row.item<int64_t>());
}

void check_shape(const std::string& name, const torch::Tensor& from, const torch::Tensor& into) {
  if (from.sizes() != into.sizes())
    throw Error("'" + name + "' has shape " + shape_text(from) + " in the pretrained model, " + shape_text(into) +
                " in the input's model");
}

}  // namespace

std::string TypeMapping::text(const std::vector<std::string>& input) const {
  std::string out;
  for (size_t t = 0; t < input.size(); ++t) {
    out += (t ? ", " : "") + input[t];
    out += source[t] < 0 ? " new" : " <- type " + std::to_string(source[t]);
  }
  if (!dropped.empty()) out += "; not in the input: " + joined(dropped, 100);
  return out;
}

TypeMapping map_types(const std::vector<std::string>& pretrained, const std::vector<std::string>& input) {
  TypeMapping m;
  for (const std::string& name : input) {
    const auto it = std::find(pretrained.begin(), pretrained.end(), name);
    m.source.push_back(it == pretrained.end() ? -1 : int64_t(it - pretrained.begin()));
    if (it == pretrained.end()) m.added.push_back(name);
  }
  for (const std::string& name : pretrained)
    if (std::find(input.begin(), input.end(), name) == input.end()) m.dropped.push_back(name);
  return m;
}

std::string TakenWeights::text() const {
  std::ostringstream out;
  out << "taken whole: " << whole.size() << (whole.empty() ? "" : " (" + joined(whole, 8) + ")") << "\n"
      << "taken for the shared elements: " << by_element.size()
      << (by_element.empty() ? "" : " (" + joined(by_element, 8) + ")") << "\n"
      << "weights of new elements and sections as a fresh model's: " << fresh.size()
      << (fresh.empty() ? "" : " (" + joined(fresh, 8) + ")") << "\n"
      << "made from the settings: " << derived.size() << "\n"
      << "numbers taken: " << (numbers.empty() ? "none" : joined(numbers, 8)) << "\n"
      << "not taken from the pretrained model: " << not_taken.size()
      << (not_taken.empty() ? "" : " (" + joined(not_taken, 8) + ")") << "\n";
  return out.str();
}

TakenWeights take_pretrained_weights(const torch::jit::Module& pretrained, const TypeMapping& mapping,
                                     const std::vector<std::string>& input_types, const AttributeRoles& roles,
                                     torch::jit::Module& model) {
  std::map<std::string, c10::IValue> source;
  for (const auto& item : pretrained.named_attributes(false))
    if (item.value.isTensor() || item.value.isDouble()) source[item.name] = item.value;
  std::set<std::string> read;
  TakenWeights taken;
  torch::NoGradGuard no_grad;
  for (const auto& item : model.named_attributes(false)) {
    const std::string& name = item.name;
    if (item.value.isDouble()) {
      if (roles(name).kind == AttributeRole::Kind::kDerived) {
        taken.derived.push_back(name);
        read.insert(name);
        continue;
      }
      const auto it = source.find(name);
      if (it != source.end() && it->second.isDouble()) {
        model.setattr(name, it->second);
        taken.numbers.push_back(name);
        read.insert(name);
      }
      continue;
    }
    if (!item.value.isTensor()) continue;
    torch::Tensor into = item.value.toTensor();
    const AttributeRole role = roles(name);
    switch (role.kind) {
      case AttributeRole::Kind::kDerived:
        taken.derived.push_back(name);
        read.insert(name);
        break;
      case AttributeRole::Kind::kOptional:
        if (source.find(name) == source.end()) {
          taken.fresh.push_back(name);
          break;
        }
        [[fallthrough]];
      case AttributeRole::Kind::kShared: {
        const auto it = source.find(name);
        if (it == source.end() || !it->second.isTensor())
          throw Error("'" + name + "' of the input's model is not in the pretrained model");
        check_shape(name, it->second.toTensor(), into);
        into.copy_(finite_cast(it->second.toTensor(), into.scalar_type(), "'" + name + "' of the pretrained model"));
        taken.whole.push_back(name);
        read.insert(name);
        break;
      }
      case AttributeRole::Kind::kTypeNamed: {
        std::vector<int64_t> ids;
        for (int64_t t : role.types) ids.push_back(mapping.source.at(size_t(t)));
        if (std::find(ids.begin(), ids.end(), int64_t(-1)) != ids.end()) {
          taken.fresh.push_back(name);
          break;
        }
        const std::string from = role.renamed(ids);
        const auto it = source.find(from);
        if (role.optional && it == source.end()) {
          taken.fresh.push_back(name);
          break;
        }
        if (it == source.end() || !it->second.isTensor())
          throw Error("'" + from + "' (for the input's '" + name + "') is not in the pretrained model");
        check_shape(from, it->second.toTensor(), into);
        into.copy_(finite_cast(it->second.toTensor(), into.scalar_type(), "'" + from + "' of the pretrained model"));
        taken.whole.push_back(name);
        read.insert(from);
        break;
      }
      case AttributeRole::Kind::kTypeRows:
      case AttributeRole::Kind::kTypeRowsChecked: {
        const auto it = source.find(name);
        if (it == source.end() || !it->second.isTensor())
          throw Error("'" + name + "' of the input's model is not in the pretrained model");
        const torch::Tensor from = it->second.toTensor();
        if (from.dim() != into.dim() || from.dim() == 0 || from.sizes().slice(1) != into.sizes().slice(1))
          throw Error("'" + name + "' has shape " + shape_text(from) + " in the pretrained model, " + shape_text(into) +
                      " in the input's model (only the number of types may differ)");
        read.insert(name);
        for (size_t t = 0; t < mapping.source.size(); ++t) {
          const int64_t s = mapping.source[t];
          if (s < 0) continue;
          const torch::Tensor row =
              finite_cast(from[s], into.scalar_type(), "'" + name + "' of the pretrained model").to(into.device());
          if (role.kind == AttributeRole::Kind::kTypeRows) {
            into[int64_t(t)].copy_(row);
          } else if (!torch::equal(into[int64_t(t)], row)) {
            throw Error(role.setting + ": " + input_types[t] + " has " + value_text(row) +
                        " in the pretrained model, " + value_text(into[int64_t(t)]) +
                        " in the input's model; fine-tuning keeps the pretrained value " +
                        "for the elements it knows: write it in the input");
          }
        }
        if (role.kind == AttributeRole::Kind::kTypeRows)
          taken.by_element.push_back(name);
        else
          taken.derived.push_back(name);
        break;
      }
    }
  }
  for (const auto& [name, value] : source)
    if (!read.count(name)) taken.not_taken.push_back(name);
  return taken;
}

}  // namespace mlip::models
