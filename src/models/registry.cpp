#include "models/registry.h"

#include <algorithm>
#include <deque>
#include <mutex>

#include "error.h"
#include "models/equivariant_model.h"
#include "models/se_e2_a_model.h"

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

std::vector<std::string> model_names(bool descriptor) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> out;
  for (const auto& e : entries())
    if (e.descriptor == descriptor) out.push_back(e.name);
  return out;
}

std::unique_ptr<Model> create_model(const ModelSettings& settings, const ModelContext& context) {
  const ModelEntry* entry = find_model(settings.type, false);
  if (entry == nullptr) entry = find_model(settings.type, true);
  if (entry == nullptr) throw Error("model type \"" + settings.type + "\" is not registered");
  return entry->create(settings, context);
}

}  // namespace mlip::models
