#include "model_loader/lora/lora_adapter.hpp"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <array>
#include <map>
#include <string_view>
#include <vector>

#include "model_loader/parameter_store.hpp"
#include "model_loader/safetensors_file.hpp"
#include "protocol/errors.hpp"
#include "transport/tensor_digest.hpp"

namespace hotswap::model_loader {
namespace {

constexpr std::string_view kPeftPrefix = "base_model.model.";
constexpr std::string_view kA = ".lora_A.weight";
constexpr std::string_view kB = ".lora_B.weight";
constexpr std::array<std::string_view, 7> kProjections = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

std::string shape_text(c10::IntArrayRef shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// One adapted projection: its A and B as the file holds them, and the slot its weight fills.
struct Projection {
  at::Tensor a, b;
  std::string a_name, b_name;
  const CheckpointSlot* slot = nullptr;
};

// The module a PEFT tensor name belongs to, and whether it is its A (else its B). What PEFT
// writes for what is not served (embeddings, DoRA's magnitudes, biases) is refused by name.
std::pair<std::string, bool> module_of(std::string_view given) {
  const std::string saved = LoraAdapter::saved_name(given);  // a live PEFT model's names too
  const std::string_view name = saved;
  std::string_view rest = name;
  if (rest.starts_with(kPeftPrefix)) rest.remove_prefix(kPeftPrefix.size());
  for (auto [suffix, is_a] : {std::pair{kA, true}, std::pair{kB, false}}) {
    if (rest.ends_with(suffix) && rest.size() > suffix.size()) {
      return {std::string(rest.substr(0, rest.size() - suffix.size())), is_a};
    }
  }
  const std::string quoted = "`" + std::string(name) + "`";
  if (rest.find("lora_embedding_") != std::string_view::npos) {
    throw protocol::ValueError(quoted + ": LoRA on embeddings is not served");
  }
  if (rest.find("lora_magnitude_vector") != std::string_view::npos) {
    throw protocol::ValueError(quoted + ": DoRA adapters are not served");
  }
  throw protocol::ValueError(quoted +
                             " is not a tensor of a LoRA adapter as PEFT writes one "
                             "(`<module>.lora_A.weight` and `<module>.lora_B.weight`)");
}

// SHA-256 of each tensor by its saved name; on the CPU, several at once (they are most of an
// adapter's build).
std::map<std::string, std::string> digests_of(const LoraAdapter::NamedTensors& tensors) {
  std::vector<std::string> hex(tensors.size());
  const bool on_cpu = std::all_of(tensors.begin(), tensors.end(),
                                  [](const auto& named) { return named.second.is_cpu(); });
  auto digest = [&](std::int64_t begin, std::int64_t end) {
    for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i)
      hex[i] = transport::sha256_hex(tensors[i].second);
  };
  const auto count = static_cast<std::int64_t>(tensors.size());
  if (on_cpu) {
    at::parallel_for(0, count, 1, digest);
  } else {
    digest(0, count);  // each one copied off the device first
  }
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    out[LoraAdapter::saved_name(tensors[i].first)] = std::move(hex[i]);
  return out;
}

}  // namespace

const CheckpointSlot& LoraAdapter::check_tensor(const LoraConfig& config, const std::string& name,
                                                c10::IntArrayRef shape, bool floating,
                                                const WeightMapping& mapping) {
  const auto [module, is_a] = module_of(name);
  const std::string quoted = "`" + name + "`";
  const CheckpointSlot* slot = mapping.find(module + ".weight");
  if (slot == nullptr) {
    throw protocol::ValueError(quoted + ": the base model has no module `" + module + "`");
  }
  if (mapping.runtime_params()[slot->param].shape.size() != 2) {
    throw protocol::ValueError(quoted + ": `" + module +
                               "` is an expert of a mixture of experts, and expert LoRA is "
                               "not served");
  }
  const std::string_view leaf = std::string_view(module).substr(module.rfind('.') + 1);
  if (std::find(kProjections.begin(), kProjections.end(), leaf) == kProjections.end()) {
    throw protocol::ValueError(quoted + ": `" + module +
                               "` is not adapted (LoRA is served on the q/k/v/o and "
                               "gate/up/down projections)");
  }
  // PEFT's shapes for a linear layer of weight [out, in] at rank r: A [r, in], B [out, r].
  const std::int64_t out = slot->shape[0], in = slot->shape[1], r = config.rank;
  const std::vector<std::int64_t> wanted = is_a ? std::vector{r, in} : std::vector{out, r};
  if (shape != c10::IntArrayRef(wanted)) {
    throw protocol::ValueError(quoted + " has shape " + shape_text(shape) + "; the base model's `" +
                               module + "` " + shape_text(slot->shape) + " at rank " +
                               std::to_string(r) + " needs " + shape_text(wanted));
  }
  if (!floating) throw protocol::ValueError(quoted + " is not a floating-point tensor");
  return *slot;
}

std::string LoraAdapter::saved_name(std::string_view name) {
  // A live PEFT model names its tensors `<module>.lora_A.<adapter>.weight`; its saved state
  // dict, `<module>.lora_A.weight`.
  for (std::string_view kind : {".lora_A.", ".lora_B."}) {
    const auto at = name.rfind(kind);
    if (at == std::string_view::npos) continue;
    const std::string_view rest = name.substr(at + kind.size());
    const auto dot = rest.find('.');
    if (dot != std::string_view::npos && rest.substr(dot) == ".weight" && rest != "weight") {
      return std::string(name.substr(0, at + kind.size())) + "weight";
    }
  }
  return std::string(name);
}

std::shared_ptr<const LoraAdapter> LoraAdapter::load(const std::filesystem::path& directory,
                                                     const WeightMapping& mapping,
                                                     c10::Device device, std::int64_t max_rank) {
  const LoraConfig config = LoraConfig::load(directory, max_rank);
  const auto path = directory / "adapter_model.safetensors";
  if (!std::filesystem::is_regular_file(path)) {
    throw protocol::ValueError("no adapter_model.safetensors in " + directory.string() +
                               " (PEFT's safetensors format is read)");
  }
  auto file = SafetensorsFile::open(path.string());
  NamedTensors tensors;
  for (const auto& info : file->tensors())
    tensors.emplace_back(info.name, file->tensor(info));
  try {
    return from_tensors(config, tensors, mapping, device);
  } catch (const protocol::ValueError& e) {
    throw protocol::ValueError(path.string() + ": " + e.what());
  }
}

std::shared_ptr<const LoraAdapter> LoraAdapter::from_tensors(const LoraConfig& config,
                                                             const NamedTensors& tensors,
                                                             const WeightMapping& mapping,
                                                             c10::Device device) {
  std::map<std::string, Projection> projections;
  for (const auto& [name, tensor] : tensors) {
    const CheckpointSlot& slot =
        check_tensor(config, name, tensor.sizes(), tensor.is_floating_point(), mapping);
    const auto [module, is_a] = module_of(name);
    Projection& p = projections[module];
    if ((is_a ? p.a : p.b).defined()) {
      throw protocol::ValueError("`" + name + "` is given twice (as `" +
                                 (is_a ? p.a_name : p.b_name) + "` too)");
    }
    p.slot = &slot;
    (is_a ? p.a : p.b) = tensor;
    (is_a ? p.a_name : p.b_name) = name;
  }

  // Each runtime parameter's projections, in the order their rows come.
  std::map<std::size_t, std::vector<const Projection*>> by_param;
  for (const auto& [module, p] : projections) {
    if (!p.a.defined() || !p.b.defined()) {
      throw protocol::ValueError("`" + module + "` has a lora_" + (p.a.defined() ? "A" : "B") +
                                 " (`" + (p.a.defined() ? p.a_name : p.b_name) + "`) and no lora_" +
                                 (p.a.defined() ? "B" : "A"));
    }
    by_param[p.slot->param].push_back(&p);
  }
  std::shared_ptr<LoraAdapter> adapter(new LoraAdapter);
  adapter->config_ = config;
  adapter->checksums_ = digests_of(tensors);
  for (const auto& [name, digest] : adapter->checksums_)
    adapter->tensor_names_.insert(name);
  adapter->pairs_.resize(mapping.runtime_params().size());
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  const double scaling = config.scaling();
  for (auto& [param, parts] : by_param) {
    std::sort(parts.begin(), parts.end(), [](const Projection* x, const Projection* y) {
      return x->slot->row_offset < y->slot->row_offset;
    });
    const std::int64_t rows = mapping.runtime_params()[param].shape[0];
    const std::int64_t r = config.rank;
    const auto total = static_cast<std::int64_t>(parts.size()) * r;
    // Written transposed in place, one pass per tensor (converted, and B scaled, as it lands):
    // a build is most of what an adapter's round costs past its transfer.
    at::Tensor a_t, b_t = at::zeros({total, rows}, options);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const CheckpointSlot& slot = *parts[i]->slot;
      const auto columns = static_cast<std::int64_t>(i) * r;
      // Column-parallel (dim 0): this rank's rows of B; row-parallel (dim 1): its columns of A.
      const at::Tensor a = slot.shard.dim == 1 ? kept_part(parts[i]->a, slot) : parts[i]->a;
      const at::Tensor kept_b = slot.shard.dim == 0 ? kept_part(parts[i]->b, slot) : parts[i]->b;
      if (!a_t.defined()) a_t = at::empty({a.size(1), total}, options);
      a_t.narrow(1, columns, r).copy_(a.t());
      at::Tensor block = b_t.narrow(0, columns, r).narrow(1, slot.row_offset, kept_b.size(0));
      block.copy_(kept_b.t());
      block.mul_(scaling);
    }
    adapter->pairs_[param] = LoraPair{std::move(a_t), std::move(b_t)};
    adapter->adapted_modules_ += parts.size();
  }
  return adapter;
}

const LoraPair* LoraAdapter::pair(std::size_t param) const {
  if (param >= pairs_.size() || !pairs_[param]) return nullptr;
  return &*pairs_[param];
}

std::uint64_t LoraAdapter::nbytes() const {
  std::uint64_t bytes = 0;
  for (const auto& p : pairs_) {
    if (p) bytes += p->a_t.nbytes() + p->b_t.nbytes();
  }
  return bytes;
}

}  // namespace hotswap::model_loader
