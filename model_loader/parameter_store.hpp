// ParameterStore: a model's live runtime tensors, by runtime parameter (see WeightMapping).
// A quantized parameter holds int8 values and a float32 scale per output row; every other
// parameter holds the runtime dtype. Forward passes read under a shared lock; a commit swaps
// tensors in under the exclusive lock, so generation sees either the old or the new weights,
// never a mix, and switches between two forward steps.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

struct RuntimeTensor {
  at::Tensor value;
  at::Tensor scale;  // int8-quantized parameters only: float32 [rows]
};

// The rows of a runtime tensor that checkpoint tensor `slot` fills, a view shaped as the part
// of it the slot keeps (CheckpointSlot::kept_shape).
// A parameter of three or more dimensions (fused experts, [E, rows, cols]) counts its rows over
// every dimension but the last, so expert x's rows follow expert x - 1's.
at::Tensor slot_rows(const at::Tensor& runtime, const CheckpointSlot& slot);
// What this rank keeps of a whole checkpoint tensor for `slot`: a view (the tensor itself when
// the slot is not sharded). Copying from it reads only those bytes.
at::Tensor kept_part(const at::Tensor& full, const CheckpointSlot& slot);

// Where a parameter that shares an allocation with others starts (the load's one allocation, a
// packed round's slab): a cache line, as libtorch aligns an allocation of its own, so that the
// kernels' loads stay aligned.
inline constexpr std::int64_t kParamAlignment = 64;

class ParameterStore {
 public:
  // Allocates every runtime tensor (uninitialized) on `device`.
  ParameterStore(const WeightMapping& mapping, c10::ScalarType dtype, c10::Device device,
                 bool quantize_int8);

  const WeightMapping& mapping() const { return mapping_; }
  c10::ScalarType dtype() const { return dtype_; }
  const c10::Device& device() const { return device_; }
  bool quantize_int8() const { return quantize_int8_; }
  // Whether `param` is held as int8 + scale (a lossy runtime format).
  bool quantized(std::size_t param) const;

  RuntimeTensor& operator[](std::size_t param) { return tensors_[param]; }
  const RuntimeTensor& operator[](std::size_t param) const { return tensors_[param]; }
  std::shared_mutex& mutex() const { return mutex_; }

  // Staged updates recycle the tensors a commit replaced as the next round's shadows, so a
  // steady stream of updates touches no fresh memory. take_spare() hands out the recycled
  // tensor of `param` or a new uninitialized one of its shape.
  at::Tensor take_spare(std::size_t param);
  void set_spare(std::size_t param, at::Tensor tensor);
  // Packed receives land in one slab of bytes whose views are the shadows of several
  // parameters (LayerwiseReload::contiguous_destination). take_spare_slab drops the spares of
  // `params` (their shadows come from the slab) and hands out a slab of at least `bytes` that no
  // live tensor is a view of any more (dropping the spares that are), recycled where one is, new
  // (its pages touched) otherwise; keep_slab takes it back once the session ends, committed or
  // not. The load's own allocation is one such slab: from the second packed round on, none is
  // new. In steady state two slabs alternate, as per-parameter spares do.
  at::Tensor take_spare_slab(std::int64_t bytes, const std::vector<std::size_t>& params);
  void keep_slab(at::Tensor slab);
  // Bytes held by the live runtime tensors.
  std::uint64_t nbytes() const;

 private:
  const WeightMapping& mapping_;
  c10::ScalarType dtype_;
  c10::Device device_;
  bool quantize_int8_;
  std::vector<RuntimeTensor> tensors_;
  std::vector<at::Tensor> spares_;
  std::vector<at::Tensor> slabs_;  // whole byte slabs whose views are live or spare tensors
  std::mutex spares_mutex_;
  mutable std::shared_mutex mutex_;
};

}  // namespace hotswap::model_loader
