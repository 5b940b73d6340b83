// LoraRegistry: the LoRA adapters a worker serves, by name, with vLLM's interface: --lora-modules
// at start-up, /v1/load_lora_adapter and /v1/unload_lora_adapter after (vLLM's rules and
// messages), at most --max-loras of them, each of rank up to --max-lora-rank. A request names
// one by its `model`. A sequence runs through the adapter served under its name at each step: one
// replaced (load_inplace, a weight-transfer round) serves its next step; one unloaded finishes
// the sequences that use it, and is gone for every later request.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model_loader/lora/lora_config.hpp"
#include "model_loader/servable_model.hpp"

namespace hotswap::worker {

struct LoraLimits {
  bool enabled = false;                                            // --enable-lora
  std::size_t max_loras = 1;                                       // --max-loras
  std::int64_t max_lora_rank = model_loader::kDefaultMaxLoraRank;  // --max-lora-rank
};

// One --lora-modules entry: `name=path`, or vLLM's JSON form
// {"name": ..., "path": ..., "base_model_name": ...}.
struct LoraModule {
  std::string name;
  std::string path;
  std::optional<std::string> base_model_name;

  // A ValueError naming what is wrong with `text`.
  static LoraModule parse(std::string_view text);
};

class LoraRegistry {
 public:
  struct Entry {
    std::string name;
    std::string path;
    std::int64_t id = 0;  // vLLM's lora_int_id: 1, 2, ... in the order adapters were loaded
    std::optional<std::string> base_model_name;
    std::shared_ptr<const model_loader::LoraAdapter> adapter;
    // The weight_version the round that made it finished with (null: read from a path, or a
    // round that gave none).
    std::optional<std::string> version;
  };
  // What a request runs through: the adapter served under a name, its version, and the id of
  // the entry (kept when the adapter is replaced in place; a new one after an unload and load).
  struct Served {
    std::shared_ptr<const model_loader::LoraAdapter> adapter;
    std::optional<std::string> version;
    std::int64_t id = 0;
  };

  // `model` must outlive the registry; `served_model_name` is the name requests give the model
  // itself, which no adapter may take (a request naming it would never reach the adapter).
  LoraRegistry(const model_loader::ServableModel& model, LoraLimits limits,
               std::string served_model_name);

  const LoraLimits& limits() const { return limits_; }

  // Reads the adapter at `path` and serves it as `name`. ValueError (vLLM's 400): LoRA not
  // enabled, a name or path missing, a name already loaded, --max-loras reached, or an adapter
  // the model cannot take (its reason). NotFound (404): nothing at `path`. `in_place` (vLLM's
  // load_inplace): a name already loaded is served from the new adapter on, under its id.
  void load(const LoraModule& module, bool in_place = false);
  // ModelNotFoundError (vLLM's 404) for a name that is not loaded.
  void unload(std::string_view name);
  // What a load of `name` must pass before the adapter is read: LoRA enabled, a name that is not
  // the served model's, and, unless it replaces the adapter served under it (`in_place`; else
  // vLLM's "already been loaded"), room within --max-loras. ValueError naming what failed.
  void check_load(const std::string& name, bool in_place) const;
  // Serves `adapter` (received through a weight update) as `name`, at `version`, from the next
  // step on: in place of the adapter served under it (its id kept; the sequences running on it
  // go on with this one), or as a new one, within --max-loras (a ValueError past it). `source`
  // is what /v1/models shows as its root.
  void commit(const std::string& name, std::shared_ptr<const model_loader::LoraAdapter> adapter,
              const std::string& source, std::optional<std::string> version);
  // The adapter served as `name`, with its id and path, or nullopt.
  std::optional<Entry> entry(std::string_view name) const;

  // The adapter served as `name` and its version, or nullopt.
  std::optional<Served> find(std::string_view name) const;
  // The same, or vLLM's 404 (ModelNotFoundError) for a name not loaded.
  Served served(std::string_view name) const;
  // Every adapter served, by id.
  std::vector<Entry> list() const;

 private:
  // A ValueError when `loaded` adapters leave no room for another.
  void check_room(std::size_t loaded) const;
  // Serves `adapter` at `version` under module.name: a new entry (within --max-loras), or,
  // `in_place`, the entry already there (else vLLM's "already been loaded").
  void place(LoraModule module, Served served, bool in_place);

  const model_loader::ServableModel& model_;
  LoraLimits limits_;
  std::string served_model_name_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry, std::less<>> adapters_;
  std::int64_t next_id_ = 1;
};

}  // namespace hotswap::worker
