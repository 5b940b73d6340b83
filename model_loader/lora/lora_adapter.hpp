// LoraAdapter: a PEFT LoRA adapter laid onto a model's runtime parameters, for every
// architecture: its tensors are found through the architecture's WeightMapping (the slot a
// projection's weight fills tells which fused runtime parameter, which rows of it, and what this
// tensor-parallel rank keeps), so an adapter is fused the way the weights are. For each adapted
// runtime parameter it holds one pair:
//   A [R, in]  the A of every adapted projection fused into it, stacked (R: their ranks summed),
//   B [out, R] each projection's B, scaled, in that projection's rows and its own columns of R,
//              zeros elsewhere (a fused qkv_proj adapted on q and v only has zero rows for k),
// so that the update of x through the whole fused parameter is (x Aᵀ) Bᵀ, two small matmuls.
// Tensor parallelism shards them as vLLM does: a column-parallel layer (qkv, gate_up) keeps this
// rank's rows of B and all of A; a row-parallel one (o, down) this rank's columns of A and all of
// B, its partial update summed with the base layer's partial product.
//
// Adapted: q/k/v/o and gate/up/down projections (Mixtral's experts and every other expert
// refused by name, as are embeddings and lm_head). A and B are held in float32 on the model's
// device, whatever the model's dtype; the update is computed in float32 and added to the base
// layer's output, as PEFT adds it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model_loader/lora/lora_config.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

// Held transposed and contiguous, as the update multiplies by them: x [rows, in] · a_t, then
// · b_t (a decode step adds a few small products per adapter and layer, each op counts).
struct LoraPair {
  at::Tensor a_t;  // Aᵀ [in, R] float32
  at::Tensor b_t;  // Bᵀ [R, out] float32, scaled
};

class LoraAdapter {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

  // Reads `directory` as PEFT saves an adapter (adapter_config.json, adapter_model.safetensors)
  // and lays it onto `mapping` (laid out for one tensor-parallel rank: its slots say what the
  // rank keeps), on `device`. A ValueError naming the file,
  // the tensor or the field for anything the model cannot take (see from_tensors).
  static std::shared_ptr<const LoraAdapter> load(const std::filesystem::path& directory,
                                                 const WeightMapping& mapping, c10::Device device,
                                                 std::int64_t max_rank);
  // From `config` and tensors with PEFT's names (`base_model.model.<module>.lora_A.weight`, the
  // prefix optional): a ValueError for a tensor of a module the model lacks or does not adapt, a
  // shape that does not match the base model at the config's rank, an A without its B.
  static std::shared_ptr<const LoraAdapter> from_tensors(const LoraConfig& config,
                                                         const NamedTensors& tensors,
                                                         const WeightMapping& mapping,
                                                         c10::Device device);

  // Checks one tensor as from_tensors checks each (a module the model has and adapts, A or B,
  // its shape at `config`'s rank), building nothing: a receive refuses a bad tensor as it
  // arrives. The slot of the projection it adapts.
  static const CheckpointSlot& check_tensor(const LoraConfig& config, const std::string& name,
                                            c10::IntArrayRef shape, bool floating,
                                            const WeightMapping& mapping);
  // The name PEFT saves a tensor under, from the one a live PEFT model gives it: the adapter's
  // name dropped (`...q_proj.lora_A.default.weight` → `...q_proj.lora_A.weight`); other names as
  // they are.
  static std::string saved_name(std::string_view name);

  const LoraConfig& config() const { return config_; }
  // The pair of runtime parameter `param`, or nullptr where the adapter leaves it alone.
  const LoraPair* pair(std::size_t param) const;
  // How many of the model's projections it adapts (checkpoint slots with an A and a B).
  std::size_t adapted_modules() const { return adapted_modules_; }
  // The saved names of the tensors it was made of (what a round replacing it must bring).
  const std::set<std::string>& tensor_names() const { return tensor_names_; }
  // SHA-256 of each tensor it was made of, as it arrived (its dtype, every row: a
  // tensor-parallel rank's too), by saved name: what weight_checker reports for an adapter and a
  // trainer's verify compares with its own tensors. Taken once, when the adapter is built: the
  // served pairs are scaled and fused from them, so they are not the bytes a trainer holds.
  const std::map<std::string, std::string>& checksums() const { return checksums_; }
  // Bytes its pairs take on the device.
  std::uint64_t nbytes() const;

 private:
  LoraAdapter() = default;

  LoraConfig config_;
  std::vector<std::optional<LoraPair>> pairs_;  // by runtime parameter
  std::size_t adapted_modules_ = 0;
  std::set<std::string> tensor_names_;
  std::map<std::string, std::string> checksums_;
};

}  // namespace hotswap::model_loader
