#include "models/registry.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <mutex>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "error.h"
#include "models/kernels/device_kernels.h"
#include "models/kernels/host_tensor.h"
#include "input/section.h"
#include "models/inference_registry.h"
#include "models/repulsion_inference.h"
#include "models/equivariant/equivariant_model.h"
#include "models/se_e2_a/se_e2_a_model.h"

namespace mlip::models {
namespace {

std::deque<ModelEntry>& entries() {
  // The built-in models, one line each (docs/models.md "Adding a model"), then those added by
  // register_model.
  static std::deque<ModelEntry> all = {
      se_e2_a_entry(),
      equivariant_entry(),
  };
  return all;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

bool answers_to(const ModelEntry& e, const std::string& name) {
  return e.name == name || std::find(e.aliases.begin(), e.aliases.end(), name) != e.aliases.end();
}

}  // namespace

void register_model(ModelEntry entry) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (entry.name.empty() || !entry.read || !entry.create)
    throw Error("register_model: an entry needs a name, a reader and a factory");
  for (const auto& e : entries())
    if (answers_to(e, entry.name) && e.descriptor == entry.descriptor)
      throw Error("register_model: a model named \"" + entry.name + "\" is already registered");
  entries().push_back(std::move(entry));
}

const ModelEntry* find_model(const std::string& name, bool descriptor) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& e : entries())
    if (e.descriptor == descriptor && answers_to(e, name)) return &e;
  return nullptr;
}

const ModelEntry* find_model_type(const std::string& type) {
  const ModelEntry* entry = find_model(type, false);
  return entry != nullptr ? entry : find_model(type, true);
}

std::vector<std::string> model_names(bool descriptor) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> out;
  for (const auto& e : entries())
    if (e.descriptor == descriptor) out.push_back(e.name);
  return out;
}

SettingsRecord inference_record(const ModelSettings& settings, const torch::jit::Module& module) {
  const ModelEntry* entry = find_model_type(settings.type);
  if (entry == nullptr) throw Error("model type \"" + settings.type + "\" is not registered");
  // A model without keys of its own (e.g. one registered by a test) records the generic ones.
  SettingsRecord record = entry->record ? entry->record(settings, module) : SettingsRecord();
  record.set("model_type", settings.type);
  record.set_words("type_map", settings.type_map);
  record.set("precision", settings.precision);
  record.set_number("cutoff", settings.cutoff());
  record.set_integer("message_layers", settings.message_layers());
  record_pair_repulsion(record, settings.pair_repulsion);
  record_long_range(record, settings.long_range);
  return record;
}

SettingsRecord stored_settings(const std::map<std::string, std::string>& extra, const torch::jit::Module& module,
                               const std::string& source) {
  const bool checkpoint = extra.count("step") != 0 || extra.count("optimizer") != 0;
  if (!checkpoint) return frozen_settings(extra, source);
  const auto config = extra.find("config");
  if (config == extra.end()) throw Error(source + ": the checkpoint lacks 'config' metadata");
  return inference_record(*parse_model_settings(config->second, source + " (its training input)"), module);
}

Capabilities capabilities_of(const ModelSettings& settings) {
  Capabilities c;
  c.model_type = settings.type;
  c.type_map = settings.type_map;
  c.dtype = settings.precision;
  c.cutoff = settings.cutoff();
  c.message_layers = settings.message_layers();
  c.devices = {"cpu", "cuda"};
  const InferenceEntry* entry = find_inference(settings.type);
  if (has_own_inference(entry, settings.long_range.enabled))
    c.inference = {own_inference_capability("cpu", settings.pair_repulsion)};
  return c;
}

MemoryEstimate estimate_training_memory(const ModelSettings& settings, const BatchSizes& batch) {
  const ModelEntry* entry = find_model_type(settings.type);
  if (entry == nullptr || !entry->memory) return {};
  return entry->memory(settings, batch);
}

std::unique_ptr<Model> create_model(const ModelSettings& settings, const ModelContext& context) {
  host_kernels_enabled();  // a bad MLIP_HOST_KERNELS or MLIP_DEVICE_KERNELS is said before any work
  device_kernels_enabled();
  const ModelEntry* entry = find_model_type(settings.type);
  if (entry == nullptr) throw Error("model type \"" + settings.type + "\" is not registered");
  return entry->create(settings, context);
}


namespace {

using namespace mlip::input;

void read_type_map(const Section& m, std::vector<std::string>& type_map) {
  type_map = m.texts("type_map");
  for (size_t i = 0; i < type_map.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (type_map[i] == type_map[j]) {
        fail(m.path_of("type_map"), "\"" + type_map[i] + "\" appears twice");
      }
    }
  }
}

const ModelEntry& select_model(const YAML::Node& model) {
  const YAML::Node type = model["type"];
  const std::string given = type && type.IsScalar() ? type.Scalar() : "standard";
  if (given != "standard") {
    const ModelEntry* entry = is_scalar(type) ? find_model(given, false) : nullptr;
    if (entry == nullptr) {
      std::vector<std::string> names = {"standard"};
      for (const auto& n : model_names(false)) names.push_back(n);
      expected("model.type", "one of " + quoted_list(names), type);
    }
    return *entry;
  }
  const YAML::Node descriptor = model["descriptor"];
  const YAML::Node dtype = descriptor && descriptor.IsMap() ? descriptor["type"] : YAML::Node();
  const std::string name = dtype && dtype.IsScalar() ? dtype.Scalar() : "se_e2_a";
  const ModelEntry* entry = find_model(name, true);
  if (entry == nullptr) {
    const auto names = model_names(true);
    expected("model.descriptor.type",
             names.size() == 1 ? quoted_list(names) + " (the only one supported)" : "one of " + quoted_list(names),
             dtype);
  }
  return *entry;
}

/// model.e0s: fit, isolated, {isolated: FILE}, or {element: eV} for every type of type_map.
ReferenceEnergies read_e0s(const Section& m, const std::vector<std::string>& type_map) {
  ReferenceEnergies e;
  if (!m.has("e0s")) return e;
  const YAML::Node node = m.get("e0s");
  const std::string expected_text =
      "fit, isolated, {isolated: FILE of isolated atoms}, or a mapping {element: eV} for every type of type_map";
  if (node.IsScalar()) {
    const std::string v = node.Scalar();
    if (v == "fit") return e;
    if (v == "isolated") return e.kind = ReferenceEnergies::Kind::kIsolated, e;
    expected(m.path_of("e0s"), expected_text, node);
  }
  if (!node.IsMap()) expected(m.path_of("e0s"), expected_text, node);
  if (node.size() == 1 && node["isolated"] &&
      std::find(type_map.begin(), type_map.end(), "isolated") == type_map.end()) {
    const YAML::Node file = node["isolated"];
    if (!file.IsScalar() || file.Scalar().empty())
      expected(m.path_of("e0s") + ".isolated", "the path of a file of isolated atoms", file);
    e.kind = ReferenceEnergies::Kind::kIsolated;
    e.file = file.Scalar();
    return e;
  }
  e.kind = ReferenceEnergies::Kind::kGiven;
  for (const auto& kv : node) {
    const std::string name = kv.first.as<std::string>();
    if (std::find(type_map.begin(), type_map.end(), name) == type_map.end())
      fail(m.path_of("e0s") + "." + name, "is not a type of type_map " + quoted_list(type_map));
    double value = 0;
    if (!kv.second.IsScalar() || !YAML::convert<double>::decode(kv.second, value) || !std::isfinite(value))
      expected(m.path_of("e0s") + "." + name, "a number (eV)", kv.second);
    e.given[name] = value;
  }
  for (const auto& name : type_map)
    if (e.given.count(name) == 0) fail(m.path_of("e0s"), "has no energy for the type \"" + name + "\" of type_map");
  return e;
}

/// model.pair_repulsion: {type: zbl, inner: Å, outer: Å}, 0 < inner < outer <= the cutoff, every
/// type an element (docs/repulsion.md).
PairRepulsionSettings read_pair_repulsion(const Section& m, const ModelSettings& settings) {
  PairRepulsionSettings s;
  if (!m.has_value("pair_repulsion")) return s;
  auto angstrom = [](double v) {
    std::ostringstream o;
    o << v << " Å";
    return o.str();
  };
  const std::string what = "a mapping {type: zbl, inner: Å, outer: Å}";
  if (!m.get("pair_repulsion").IsMap()) expected(m.path_of("pair_repulsion"), what, m.get("pair_repulsion"));
  const Section r = m.section("pair_repulsion", {"type", "inner", "outer"});
  r.require({"type", "inner", "outer"});
  s.type = r.choice("type", "zbl", {"zbl"});
  s.inner = r.number("inner", 0.0, Bound::kPositive);
  s.outer = r.number("outer", 0.0, Bound::kPositive);
  if (!(s.inner < s.outer))
    expected(r.path_of("outer"), "a radius larger than inner (" + angstrom(s.inner) + ")", r.get("outer"));
  if (s.outer > settings.cutoff())
    expected(r.path_of("outer"), "at most the model's cutoff (" + angstrom(settings.cutoff()) + ")",
             r.get("outer"));
  for (const auto& name : settings.type_map)
    if (atomic_number(name) == 0)
      fail(m.path_of("pair_repulsion"), "needs element symbols in model.type_map (the nuclear charges), got \"" +
                                            name + "\"");
  return s;
}

/// model.long_range: {sigma: Å, kspace_spacing: Å, total_charge: e}, each optional (defaults
/// 1.0, 2.0, 0), for a model type that computes it (docs/long_range.md).
LongRangeSettings read_long_range(const Section& m, const ModelEntry& entry) {
  LongRangeSettings s;
  if (!m.has("long_range")) return s;
  const std::string what = "a mapping {sigma: Å, kspace_spacing: Å, total_charge: e} (each optional)";
  const YAML::Node node = m.get("long_range");
  if (!node.IsMap() && !node.IsNull()) expected(m.path_of("long_range"), what, node);
  if (!entry.long_range)
    fail(m.path_of("long_range"), "the model type \"" + entry.name + "\" has no long-range term");
  s.enabled = true;
  if (node.IsNull()) return s;
  const Section r = m.section("long_range", {"sigma", "kspace_spacing", "total_charge"});
  s.sigma = r.number("sigma", s.sigma, Bound::kPositive);
  s.kspace_spacing = r.number("kspace_spacing", s.kspace_spacing, Bound::kPositive);
  s.total_charge = r.number("total_charge", s.total_charge);
  return s;
}

}  // namespace

std::shared_ptr<const ModelSettings> read_model_section(const YAML::Node& node) {
  const ModelEntry& entry = select_model(node);
  std::vector<std::string> keys = entry.keys;
  keys.push_back("e0s");             // every model's (ModelSettings::e0s)
  keys.push_back("pair_repulsion");  // every model's (ModelSettings::pair_repulsion)
  keys.push_back("long_range");      // every model's that computes it (ModelSettings::long_range)
  const Section m(node, "model", keys);
  m.require({"type_map"});
  std::vector<std::string> type_map;
  read_type_map(m, type_map);
  std::shared_ptr<ModelSettings> settings = entry.read(m, type_map);
  settings->type_map = type_map;
  settings->statistics_batches = m.integer("data_stat_nbatch", settings->statistics_batches);
  settings->e0s = read_e0s(m, type_map);
  settings->pair_repulsion = read_pair_repulsion(m, *settings);
  settings->long_range = read_long_range(m, entry);
  return settings;
}

std::shared_ptr<const ModelSettings> parse_model_settings(const std::string& text, const std::string& source) {
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || !root["model"]) throw Error("no model section");
    return read_model_section(root["model"]);
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  } catch (const YAML::Exception& e) {
    throw Error(source + ": " + e.msg);
  }
}

}  // namespace mlip::models
