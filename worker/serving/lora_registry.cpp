#include "worker/serving/lora_registry.hpp"

#include <algorithm>
#include <filesystem>

#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::worker {

LoraModule LoraModule::parse(std::string_view text) {
  const std::string quoted = "--lora-modules entry '" + std::string(text) + "'";
  LoraModule module;
  if (text.starts_with("{")) {
    auto parsed = protocol::parse_bounded_json(text);
    if (!parsed.ok()) throw protocol::ValueError(quoted + ": " + parsed.reason);
    const auto& json = parsed.value;
    if (!json.is_object() || !json.contains("name") || !json["name"].is_string() ||
        !json.contains("path") || !json["path"].is_string()) {
      throw protocol::ValueError(quoted + ": the JSON form needs \"name\" and \"path\" (strings)");
    }
    module.name = json["name"].get<std::string>();
    module.path = json["path"].get<std::string>();
    if (auto base = json.find("base_model_name"); base != json.end() && base->is_string())
      module.base_model_name = base->get<std::string>();
  } else {
    const auto eq = text.find('=');
    if (eq == std::string_view::npos) {
      throw protocol::ValueError(quoted + ": expected name=path or a JSON object");
    }
    module.name = std::string(text.substr(0, eq));
    module.path = std::string(text.substr(eq + 1));
  }
  if (module.name.empty() || module.path.empty()) {
    throw protocol::ValueError(quoted + ": both the name and the path must be given");
  }
  return module;
}

LoraRegistry::LoraRegistry(const model_loader::ServableModel& model, LoraLimits limits,
                           std::string served_model_name)
    : model_(model), limits_(limits), served_model_name_(std::move(served_model_name)) {}

void LoraRegistry::check_room(std::size_t loaded) const {
  if (loaded >= limits_.max_loras) {
    throw protocol::ValueError(std::to_string(loaded) +
                               " LoRA adapters are loaded, as many as --max-loras " +
                               std::to_string(limits_.max_loras) + " allows: unload one first");
  }
}

void LoraRegistry::place(LoraModule module, Served served, bool in_place) {
  // served.id is the entry's to give: kept in place, the next one for a new entry.
  std::lock_guard lock(mutex_);
  if (auto it = adapters_.find(module.name); it != adapters_.end()) {
    if (!in_place) {
      throw protocol::ValueError("The lora adapter '" + module.name + "' has already been loaded.");
    }
    // The sequences running on the old adapter take this one at their next step.
    it->second.path = std::move(module.path);
    if (module.base_model_name) it->second.base_model_name = std::move(module.base_model_name);
    it->second.adapter = std::move(served.adapter);
    it->second.version = std::move(served.version);
    return;
  }
  check_room(adapters_.size());
  std::string name = module.name;
  adapters_.emplace(std::move(name), Entry{std::move(module.name), std::move(module.path),
                                           next_id_++, std::move(module.base_model_name),
                                           std::move(served.adapter), std::move(served.version)});
}

void LoraRegistry::check_load(const std::string& name, bool in_place) const {
  if (!limits_.enabled) {
    throw protocol::ValueError("LoRA is not enabled. Use --enable-lora to enable LoRA.");
  }
  if (name == served_model_name_) {
    throw protocol::ValueError("'" + name +
                               "' is the served model's name: a LoRA adapter needs a name of "
                               "its own");
  }
  std::lock_guard lock(mutex_);
  const bool held = adapters_.contains(name);
  if (held && !in_place) {
    throw protocol::ValueError("The lora adapter '" + name + "' has already been loaded.");
  }
  if (!held) check_room(adapters_.size());
}

void LoraRegistry::load(const LoraModule& module, bool in_place) {
  if (module.name.empty() || module.path.empty()) {
    throw protocol::ValueError("Both 'lora_name' and 'lora_path' must be provided.");
  }
  // Refused before the adapter is read; placing it checks again (a concurrent load).
  check_load(module.name, in_place);
  std::error_code ec;
  if (!std::filesystem::is_directory(module.path, ec)) {
    throw protocol::ModelNotFoundError("No adapter found for " + module.path);
  }
  // Read outside the lock: requests keep finding the adapters already served meanwhile.
  auto adapter = model_.load_lora_adapter(module.path, limits_.max_lora_rank);
  place(module, {std::move(adapter), std::nullopt}, in_place);
}

void LoraRegistry::commit(const std::string& name,
                          std::shared_ptr<const model_loader::LoraAdapter> adapter,
                          const std::string& source, std::optional<std::string> version) {
  place({name, source, std::nullopt}, {std::move(adapter), std::move(version)}, /*in_place=*/true);
}

std::optional<LoraRegistry::Entry> LoraRegistry::entry(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto it = adapters_.find(name);
  if (it == adapters_.end()) return std::nullopt;
  return it->second;
}

namespace {
protocol::ModelNotFoundError not_loaded(std::string_view name) {
  return protocol::ModelNotFoundError("The lora adapter '" + std::string(name) +
                                      "' cannot be found.");
}
}  // namespace

void LoraRegistry::unload(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = adapters_.find(name);
  if (it == adapters_.end()) throw not_loaded(name);
  adapters_.erase(it);
}

LoraRegistry::Served LoraRegistry::served(std::string_view name) const {
  if (auto found = find(name)) return *found;
  throw not_loaded(name);
}

std::optional<LoraRegistry::Served> LoraRegistry::find(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto it = adapters_.find(name);
  if (it == adapters_.end()) return std::nullopt;
  return Served{it->second.adapter, it->second.version, it->second.id};
}

std::vector<LoraRegistry::Entry> LoraRegistry::list() const {
  std::lock_guard lock(mutex_);
  std::vector<Entry> out;
  for (const auto& [name, entry] : adapters_)
    out.push_back(entry);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
  return out;
}

}  // namespace hotswap::worker
