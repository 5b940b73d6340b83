#include "model_loader/synthetic_checkpoint.hpp"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <fstream>
#include <functional>

#include "model_loader/architecture_registry.hpp"
#include "model_loader/safetensors_writer.hpp"
#include "model_loader/weight_mapping.hpp"
#include "protocol/errors.hpp"
#include "protocol/param_meta.hpp"

namespace hotswap::model_loader {
namespace {

namespace fs = std::filesystem;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from the top 24 bits.
float unit(std::uint64_t bits) {
  return static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Fills `out` (any floating dtype) with center + spread × uniform[-1, 1), keyed by `key`.
void fill(at::Tensor out, std::uint64_t key, float center, float spread) {
  at::Tensor flat = out.view({-1});
  const std::int64_t n = flat.numel();
  constexpr std::int64_t kChunk = 1 << 16;
  at::parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](std::int64_t begin, std::int64_t end) {
    at::Tensor buffer = at::empty({kChunk}, at::TensorOptions().dtype(at::kFloat));
    float* values = buffer.data_ptr<float>();
    for (std::int64_t c = begin; c < end; ++c) {
      std::int64_t first = c * kChunk, count = std::min(kChunk, n - first);
      for (std::int64_t i = 0; i < count; ++i) {
        values[i] = center + spread * unit(splitmix64(key ^ static_cast<std::uint64_t>(first + i)));
      }
      flat.narrow(0, first, count).copy_(buffer.narrow(0, 0, count));
    }
  });
}

}  // namespace

std::uint64_t write_synthetic_checkpoint(const fs::path& directory, const ModelConfig& config,
                                         const SyntheticCheckpointOptions& options) {
  fs::create_directories(directory);
  {
    std::ofstream out(directory / "config.json");
    out << config.to_json().dump(2) << "\n";
    if (!out) throw protocol::RuntimeError("cannot write " + (directory / "config.json").string());
  }

  // The checkpoint's tensors, in the order a Hugging Face export lists them.
  WeightMapping mapping =
      ArchitectureRegistry::builtin().find(config.architecture).weight_mapping(config, {});
  std::vector<SafetensorsEntry> entries;
  std::uint64_t total = 0;
  for (const auto& slot : mapping.slots()) {
    entries.push_back({slot.name, config.torch_dtype, slot.shape});
    total += protocol::ParamMeta{slot.name, config.torch_dtype, slot.shape}.nbytes();
  }

  // Group into shards of at most shard_size bytes (a tensor larger than that gets its own).
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  std::uint64_t in_shard = 0;
  for (auto& e : entries) {
    std::uint64_t bytes = protocol::ParamMeta{e.name, e.dtype, e.shape}.nbytes();
    if (options.shard_size_bytes && in_shard > 0 && in_shard + bytes > *options.shard_size_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(std::move(e));
    in_shard += bytes;
  }

  nlohmann::json weight_map = nlohmann::json::object();
  for (std::size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    if (shards.size() == 1) {
      std::snprintf(name, sizeof(name), "model.safetensors");
    } else {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    }
    SafetensorsWriter writer((directory / name).string(), shards[s], {{"format", "pt"}});
    for (const auto& e : shards[s]) {
      weight_map[e.name] = name;
      std::uint64_t key = splitmix64(options.seed ^ std::hash<std::string>{}(e.name));
      at::Tensor view = writer.tensor(e.name);
      if (view.numel() == 0) continue;
      bool is_norm = e.name.ends_with("norm.weight");
      bool is_bias = e.name.ends_with(".bias");
      float fan_in = static_cast<float>(e.shape.back());
      // Uniform on [-a, a] has variance a²/3: a = √3/√fan_in gives variance 1/fan_in.
      float spread =
          is_norm || is_bias ? 0.1f : static_cast<float>(options.scale) * std::sqrt(3.0f / fan_in);
      fill(view, key, is_norm ? 1.0f : 0.0f, spread);
    }
    writer.commit();
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream out(directory / "model.safetensors.index.json");
    out << index.dump(2) << "\n";
  }
  return total;
}

}  // namespace hotswap::model_loader
