#include "model_loader/parameter_store.hpp"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/accumulate.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include <utility>

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

namespace {

// Refuses a model that cannot fit before libtorch is asked to allocate it: a config.json with a
// typo in it (a vocabulary of 2^33) is an error that says so, not an allocator backtrace.
void check_fits_in_memory(const std::vector<RuntimeParam>& params, std::size_t item_size,
                          const c10::Device& device) {
  long double bytes = 0;
  for (const auto& p : params) {
    long double n = item_size;
    for (auto d : p.shape)
      n *= static_cast<long double>(d);
    bytes += n;
  }
  if (!device.is_cpu()) return;  // a GPU's memory is its allocator's to judge
  const long double memory = static_cast<long double>(::sysconf(_SC_PHYS_PAGES)) *
                             static_cast<long double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && bytes > memory) {
    throw protocol::ValueError(
        "config.json describes a model whose weights take " +
        std::to_string(static_cast<long long>(bytes / 1e9)) + " GB, but this machine has " +
        std::to_string(static_cast<long long>(memory / 1e9)) +
        " GB of memory; check its sizes (hidden_size, intermediate_size, vocab_size, "
        "num_hidden_layers)");
  }
}

// Weights are written in bulk (a checkpoint load, a full sync into a fresh shadow) and read in
// bulk by every decode step. On 2 MiB pages a 300 MB load takes ~150 page faults instead of
// ~75,000 — the faults, not the copying, were most of a load's time — and decode misses the TLB
// less. An allocation of 2 MiB or more (the load's parameters, a slab, a spare) starts on a
// 2 MiB boundary (a view into one 2 MiB larger, whose padding is never touched, so never
// backed), so that all of it can be a huge page: advising only the aligned middle of a libtorch
// allocation left up to 4 MiB of each tensor on small pages (of the 311 MB bench model, 186–229 MB
// were on huge pages after a load, 231–274 MB with whole tensors aligned; checkpoint load
// 0.58–0.90× → 0.77–0.87× a plain read). Advice only: where transparent huge pages are off, nothing
// changes but the alignment.
at::Tensor empty_on_huge_pages(at::IntArrayRef shape, const at::TensorOptions& options) {
  constexpr std::int64_t kHugePage = 2 << 20;
  const std::int64_t nbytes =
      c10::multiply_integers(shape) *
      static_cast<std::int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  if (!options.device().is_cpu() || nbytes < kHugePage) return at::empty(shape, options);
  at::Tensor raw = at::empty({nbytes + kHugePage}, options.dtype(at::kByte));
  const auto start = reinterpret_cast<std::uintptr_t>(raw.data_ptr());
  const auto pad = static_cast<std::int64_t>((kHugePage - start % kHugePage) % kHugePage);
  const std::uintptr_t aligned = start + static_cast<std::uintptr_t>(pad);
  // Only whole huge pages can be advised; the last partial one stays on small pages.
  const std::uintptr_t end = (aligned + static_cast<std::uintptr_t>(nbytes)) & ~(kHugePage - 1);
  if (end > aligned) ::madvise(reinterpret_cast<void*>(aligned), end - aligned, MADV_HUGEPAGE);
  return raw.narrow(0, pad, nbytes).view(c10::typeMetaToScalarType(options.dtype())).view(shape);
}

}  // namespace

ParameterStore::ParameterStore(const WeightMapping& mapping, c10::ScalarType dtype,
                               c10::Device device, bool quantize_int8)
    : mapping_(mapping), dtype_(dtype), device_(device), quantize_int8_(quantize_int8) {
  const auto& params = mapping_.runtime_params();
  check_fits_in_memory(params, quantize_int8_ ? 1 : c10::elementSize(dtype_), device_);
  tensors_.resize(params.size());
  // The unquantized parameters are views into one allocation, each on a cache line: once a
  // commit has replaced them all, the allocation is a free slab (take_spare_slab), and a packed
  // round lands in it instead of in memory never touched before.
  const auto item = static_cast<std::int64_t>(c10::elementSize(dtype_));
  std::vector<std::int64_t> starts(params.size(), 0);
  std::int64_t total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (quantized(i)) continue;
    starts[i] = total;
    total += (c10::multiply_integers(params[i].shape) * item + kParamAlignment - 1) /
             kParamAlignment * kParamAlignment;
  }
  const auto options = at::TensorOptions().device(device_);
  at::Tensor region = empty_on_huge_pages({total}, options.dtype(at::kByte));
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (quantized(i)) {
      tensors_[i].value = empty_on_huge_pages(params[i].shape, options.dtype(at::kChar));
      tensors_[i].scale = at::empty({params[i].shape[0]}, options.dtype(at::kFloat));
    } else {
      tensors_[i].value =
          region.narrow(0, starts[i], c10::multiply_integers(params[i].shape) * item)
              .view(dtype_)
              .view(params[i].shape);
    }
  }
  slabs_.push_back(std::move(region));
}

at::Tensor slot_rows(const at::Tensor& runtime, const CheckpointSlot& slot) {
  const at::Tensor rows = runtime.dim() > 2 ? runtime.view({-1, runtime.size(-1)}) : runtime;
  return rows.narrow(0, slot.row_offset, slot.kept_shape()[0]);
}

at::Tensor kept_part(const at::Tensor& full, const CheckpointSlot& slot) {
  if (slot.shard.whole()) return full;
  return full.narrow(slot.shard.dim, slot.shard.start, slot.shard.size);
}

at::Tensor ParameterStore::take_spare(std::size_t param) {
  {
    std::lock_guard lock(spares_mutex_);
    if (spares_.size() > param && spares_[param].defined())
      return std::exchange(spares_[param], {});
  }
  std::shared_lock lock(mutex_);
  const at::Tensor& like = tensors_[param].value;
  return empty_on_huge_pages(like.sizes(), like.options());
}

void ParameterStore::set_spare(std::size_t param, at::Tensor tensor) {
  std::lock_guard lock(spares_mutex_);
  if (spares_.size() <= param) spares_.resize(tensors_.size());
  spares_[param] = std::move(tensor);
}

at::Tensor ParameterStore::take_spare_slab(std::int64_t bytes,
                                           const std::vector<std::size_t>& params) {
  at::Tensor chosen;
  {
    // The order a commit takes them in (set_spare under the exclusive lock).
    std::shared_lock live_lock(mutex_);
    std::lock_guard lock(spares_mutex_);
    if (spares_.size() < tensors_.size()) spares_.resize(tensors_.size());
    for (std::size_t p : params)
      spares_[p] = at::Tensor();
    auto of = [](const at::Tensor& slab) {
      return [storage = slab.storage().unsafeGetStorageImpl()](const at::Tensor& t) {
        return t.defined() && t.storage().unsafeGetStorageImpl() == storage;
      };
    };
    // The first slab no live tensor is a view of is this session's; its spares go (their
    // parameters get shadows of their own if they need them). One nothing views at all is
    // garbage. So memory stays at two slabs.
    std::erase_if(slabs_, [&](at::Tensor& slab) {
      const auto views = of(slab);
      if (std::any_of(tensors_.begin(), tensors_.end(),
                      [&](const RuntimeTensor& t) { return views(t.value); })) {
        return false;
      }
      if (!chosen.defined() && slab.numel() >= bytes) {
        for (auto& spare : spares_)
          if (views(spare)) spare = at::Tensor();
        chosen = std::move(slab);
        return true;
      }
      return std::none_of(spares_.begin(), spares_.end(), views);
    });
  }
  if (chosen.defined()) return chosen.narrow(0, 0, bytes);
  at::Tensor fresh =
      empty_on_huge_pages({bytes}, at::TensorOptions().dtype(at::kByte).device(device_));
  // Its pages are faulted in here, a write to each, before a broadcast lands in them: faulted in
  // by gloo's receive, page by page inside the socket's copy, they stalled the stream (442 MB:
  // the round's receive 0.36-0.88 s against 0.12 s into pages already in; this takes
  // 0.05-0.23 s).
  if (device_.is_cpu()) {
    auto* data = static_cast<volatile std::uint8_t*>(fresh.data_ptr());
    const std::int64_t page = ::sysconf(_SC_PAGESIZE);
    at::parallel_for(0, bytes, std::int64_t{64} << 20, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t at = (begin + page - 1) / page * page; at < end; at += page)
        data[at] = 0;
    });
  }
  return fresh;
}

void ParameterStore::keep_slab(at::Tensor slab) {
  std::lock_guard lock(spares_mutex_);
  slabs_.push_back(std::move(slab));
}

bool ParameterStore::quantized(std::size_t param) const {
  return quantize_int8_ && mapping_.runtime_params()[param].quantizable;
}

std::uint64_t ParameterStore::nbytes() const {
  std::uint64_t total = 0;
  for (const auto& t : tensors_) {
    total += t.value.nbytes();
    if (t.scale.defined()) total += t.scale.nbytes();
  }
  return total;
}

}  // namespace hotswap::model_loader
