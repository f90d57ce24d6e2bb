#include "models/inference_registry.h"

#include <deque>
#include <mutex>

#include <yaml-cpp/yaml.h>

#include "error.h"
#include "models/equivariant/equivariant_inference.h"
#include "models/repulsion_inference.h"
#include "models/se_e2_a/se_e2_a_inference.h"

namespace mlip::models {
namespace {

std::deque<InferenceEntry>& entries() {
  // The built-in models, one line each (docs/architecture.md "Adding a model").
  static std::deque<InferenceEntry> all = {
      se_e2_a_inference_entry(),
      equivariant_inference_entry(),
  };
  return all;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

/// A YAML scalar as the flattened record writes it: flags as "true" / "false", the rest as written.
std::string scalar_text(const YAML::Node& node) {
  bool flag = false;
  if (YAML::convert<bool>::decode(node, flag)) return flag ? "true" : "false";
  return node.Scalar();
}

/// The mappings below `node` as "a.b: value" keys of `out` (sequences of scalars joined by
/// spaces; anything else skipped: the legacy readers need none of it).
void flatten(const YAML::Node& node, const std::string& prefix, SettingsRecord& out) {
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    const std::string key = prefix + kv.first.Scalar();
    const YAML::Node& value = kv.second;
    if (value.IsScalar()) {
      if (key.find_first_of(":\n") == std::string::npos && value.Scalar().find('\n') == std::string::npos)
        out.set(key, scalar_text(value));
    } else if (value.IsMap()) {
      flatten(value, key + ".", out);
    } else if (value.IsSequence()) {
      std::string items;
      bool scalars = true;
      for (const auto& item : value) {
        if (!item.IsScalar() || item.Scalar().find_first_of(" \n") != std::string::npos) scalars = false;
        else items += (items.empty() ? "" : " ") + item.Scalar();
      }
      if (scalars && key.find_first_of(":\n") == std::string::npos) out.set(key, items);
    }
  }
}

std::string lookup(const std::map<std::string, std::string>& extra, const std::string& key, const std::string& source) {
  auto it = extra.find(key);
  if (it == extra.end()) throw Error(source + ": the frozen model lacks its '" + key + "' metadata");
  return it->second;
}

/// The record of a model frozen by mlip 0.1.0, which kept its training input and no record.
SettingsRecord legacy_settings(const std::map<std::string, std::string>& extra, const std::string& source) {
  const std::string type = lookup(extra, "model_type", source);
  const InferenceEntry* entry = find_inference(type);
  if (entry == nullptr || !entry->legacy_record)
    throw Error(source + ": model type \"" + type + "\" is not one this mlip knows");
  const std::string where = source + " (the training input stored in it)";
  SettingsRecord stored(where);
  try {
    const YAML::Node root = YAML::Load(lookup(extra, "config", source));
    if (!root.IsMap() || !root["model"] || !root["model"].IsMap()) throw Error(where + ": no model section");
    flatten(root["model"], "", stored);
  } catch (const YAML::Exception& e) {
    throw Error(where + ": " + e.msg);
  }
  SettingsRecord record = entry->legacy_record(stored);
  record.set("model_type", type);
  std::istringstream names(lookup(extra, "type_names", source));
  std::vector<std::string> type_map;
  for (std::string n; names >> n;) type_map.push_back(n);
  record.set_words("type_map", type_map);
  record.set("precision", lookup(extra, "model_dtype", source));
  record.set("cutoff", lookup(extra, "r_max", source));
  return SettingsRecord::parse(record.to_text(), source + ": inference settings (from its training input)");
}

}  // namespace

void register_inference(InferenceEntry entry) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (entry.type.empty()) throw Error("register_inference: an entry needs a model type");
  for (const auto& e : entries())
    if (e.type == entry.type) throw Error("register_inference: the model type \"" + entry.type + "\" is taken");
  entries().push_back(std::move(entry));
}

const InferenceEntry* find_inference(const std::string& type) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& e : entries())
    if (e.type == type) return &e;
  return nullptr;
}

SettingsRecord frozen_settings(const std::map<std::string, std::string>& extra, const std::string& source) {
  auto it = extra.find("inference_settings");
  if (it == extra.end()) return legacy_settings(extra, source);
  return SettingsRecord::parse(it->second, source + ": inference_settings");
}

SettingsRecord completed_settings(const SettingsRecord& record, const torch::jit::Module& module) {
  const InferenceEntry* entry = find_inference(record.required("model_type"));
  SettingsRecord out = record;
  if (entry == nullptr || !entry->read_keys) return out;
  const SettingsRecord read = entry->read_keys(record, module);
  for (const auto& [key, value] : read.values())
    if (!out.has(key)) out.set(key, value);
  return out;
}

Capabilities capabilities_from(const SettingsRecord& record) {
  Capabilities c;
  c.model_type = record.required("model_type");
  c.type_map = record.words("type_map", {});
  c.dtype = record.text("precision", "float64");
  c.cutoff = record.number("cutoff", 0.0);
  c.message_layers = record.integer("message_layers", 1);
  c.devices = {"cpu", "cuda"};
  const InferenceEntry* entry = find_inference(c.model_type);
  if (has_own_inference(entry, long_range_from(record).enabled))
    c.inference = {own_inference_capability("cpu", pair_repulsion_from(record))};
  return c;
}

}  // namespace mlip::models
