// StepKernels over FlashInfer's kernels (flashinfer_kernels.hpp): each call hands the tensors'
// device pointers to one kernel on the current CUDA stream, and raises a failed launch with its
// CUDA status. Nothing here waits for the device, so a CUDA graph captures a step whole.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <cmath>
#include <string>

#include "model_loader/kernels/flashinfer_kernels.hpp"
#include "model_loader/kernels/step_kernels.hpp"
#include "protocol/errors.hpp"

#ifdef HOTSWAP_TORCH_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace hotswap::model_loader::kernels {
namespace {

std::optional<KernelDType> kernel_dtype(c10::ScalarType dtype) {
  if (dtype == at::kBFloat16) return KernelDType::kBFloat16;
  if (dtype == at::kHalf) return KernelDType::kFloat16;
  return std::nullopt;
}

void check(KernelStatus status, const char* kernel) {
  if (status != 0) {
    throw protocol::RuntimeError(std::string("the GPU kernel ") + kernel +
                                 " failed: " + describe_kernel_status(status));
  }
}

std::uint32_t u32(std::int64_t value) {
  return static_cast<std::uint32_t>(value);
}

class FlashInferStepKernels final : public StepKernels {
 public:
  FlashInferStepKernels(const StepKernelShape& shape, KernelDType dtype, c10::Device device)
      : shape_(shape), dtype_(dtype), device_(device) {
    attention_.dtype = dtype;
    attention_.q_heads = u32(shape.q_heads);
    attention_.kv_heads = u32(shape.kv_heads);
    attention_.head_dim = u32(shape.head_dim);
    attention_.page_size = u32(shape.block_size);
    attention_.window_left =
        shape.sliding_window ? static_cast<std::int32_t>(*shape.sliding_window - 1) : -1;
    attention_.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
    // Allocated once: a captured graph finds its plan where it left it.
    auto bytes = at::TensorOptions().dtype(at::kByte);
    float_workspace_ =
        at::empty({std::int64_t(kAttentionFloatWorkspaceBytes)}, bytes.device(device));
    int_workspace_ = at::empty({std::int64_t(kAttentionIntWorkspaceBytes)}, bytes.device(device));
    pinned_workspace_ =
        at::empty({std::int64_t(kAttentionIntWorkspaceBytes)}, bytes.pinned_memory(true));
    workspace_ = {float_workspace_.data_ptr(), kAttentionFloatWorkspaceBytes,
                  int_workspace_.data_ptr(), pinned_workspace_.data_ptr(),
                  kAttentionIntWorkspaceBytes};
  }

  void plan(const KernelStepInputs& step, bool for_cuda_graph) override {
    const bool decode = step.decode && decode_group_size_supported(u32(group()));
    if (decode) {
      check(plan_decode(attention_, workspace_, step.page_indptr_host.data(), u32(step.sequences),
                        for_cuda_graph, plan_, stream()),
            "plan_decode");
    } else {
      check(plan_prefill(attention_, workspace_, step.q_indptr_host.data(),
                         step.page_indptr_host.data(), u32(step.sequences), u32(step.rows),
                         for_cuda_graph, plan_, stream()),
            "plan_prefill");
    }
  }

  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) override {
    at::Tensor out = at::empty_like(x);
    check(kernels::rms_norm(dtype_, x.data_ptr(), weight.data_ptr(), out.data_ptr(),
                            u32(x.numel() / x.size(-1)), u32(x.size(-1)),
                            static_cast<float>(shape_.eps), stream()),
          "rms_norm");
    return out;
  }

  void add_rms_norm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight) override {
    check(fused_add_rms_norm(dtype_, x.data_ptr(), residual.data_ptr(), weight.data_ptr(),
                             u32(x.size(0)), u32(x.size(1)), static_cast<float>(shape_.eps),
                             stream()),
          "fused_add_rms_norm");
  }

  at::Tensor silu_and_mul(const at::Tensor& gate_up) override {
    const std::int64_t width = gate_up.size(1) / 2;
    at::Tensor out = at::empty({gate_up.size(0), width}, gate_up.options());
    check(kernels::silu_and_mul(dtype_, gate_up.data_ptr(), out.data_ptr(), u32(gate_up.size(0)),
                                u32(width), stream()),
          "silu_and_mul");
    return out;
  }

  void rotate(at::Tensor& q, at::Tensor& k, const KernelStepInputs& step) override {
    if (!shape_.cos_sin.defined()) return;
    check(apply_rotary(dtype_, q.data_ptr(), k.data_ptr(), shape_.cos_sin.data_ptr<float>(),
                       step.positions.data_ptr<std::int32_t>(), u32(step.rows), u32(shape_.q_heads),
                       u32(shape_.kv_heads), u32(shape_.head_dim), u32(shape_.head_dim), stream()),
          "apply_rotary");
  }

  void append_kv(const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_pages,
                 const at::Tensor& value_pages, const KernelStepInputs& step) override {
    check(append_paged_kv(dtype_, view(key_pages, value_pages, step), k.data_ptr(), v.data_ptr(),
                          step.sequence_of.data_ptr<std::int32_t>(),
                          step.positions.data_ptr<std::int32_t>(), u32(step.rows), stream()),
          "append_paged_kv");
  }

  at::Tensor attention(const at::Tensor& q, const at::Tensor& key_pages,
                       const at::Tensor& value_pages, const KernelStepInputs& step) override {
    at::Tensor out = at::empty_like(q);
    const PagedKvView cache = view(key_pages, value_pages, step);
    if (plan_.prefill) {
      check(run_prefill(attention_, workspace_, plan_, q.data_ptr(),
                        step.q_indptr.data_ptr<std::int32_t>(), cache, out.data_ptr(), stream()),
            "run_prefill");
    } else {
      check(
          run_decode(attention_, workspace_, plan_, q.data_ptr(), cache, out.data_ptr(), stream()),
          "run_decode");
    }
    return out;
  }

 private:
  std::int64_t group() const { return shape_.q_heads / shape_.kv_heads; }

  PagedKvView view(const at::Tensor& keys, const at::Tensor& values,
                   const KernelStepInputs& step) const {
    return PagedKvView{keys.data_ptr(),
                       values.data_ptr(),
                       step.page_indices.data_ptr<std::int32_t>(),
                       step.page_indptr.data_ptr<std::int32_t>(),
                       step.last_page_len.data_ptr<std::int32_t>(),
                       u32(step.sequences),
                       u32(shape_.kv_heads),
                       u32(shape_.block_size),
                       u32(shape_.head_dim)};
  }

  StreamHandle stream() const {
#ifdef HOTSWAP_TORCH_HAS_CUDA
    return c10::cuda::getCurrentCUDAStream(device_.index()).stream();
#else
    return nullptr;
#endif
  }

  StepKernelShape shape_;
  KernelDType dtype_;
  c10::Device device_;
  AttentionShape attention_;
  at::Tensor float_workspace_, int_workspace_, pinned_workspace_;
  AttentionWorkspace workspace_;
  AttentionPlan plan_;
};

}  // namespace

std::optional<std::string> flashinfer_refusal(const StepKernelShape& shape, c10::ScalarType dtype,
                                              c10::Device device) {
  if (!kernels_built()) return describe_kernel_status(kNotBuilt);
  if (!device.is_cuda()) return "the GPU kernels need a CUDA device, not " + device.str();
  if (!kernel_dtype(dtype)) {
    return std::string("the GPU kernels run bfloat16 and float16 models, not ") +
           c10::toString(dtype);
  }
  if (!attention_head_dim_supported(u32(shape.head_dim))) {
    return "the GPU kernels' attention runs head dims 64 and 128, not " +
           std::to_string(shape.head_dim);
  }
  if (shape.kv_heads < 1 || shape.q_heads % shape.kv_heads != 0) {
    return "the GPU kernels need whole groups of query heads per KV head (" +
           std::to_string(shape.q_heads) + " over " + std::to_string(shape.kv_heads) + ")";
  }
  return std::nullopt;
}

std::unique_ptr<StepKernels> make_flashinfer_step_kernels(const StepKernelShape& shape,
                                                          c10::ScalarType dtype,
                                                          c10::Device device) {
  if (auto why = flashinfer_refusal(shape, dtype, device)) throw protocol::ValueError(*why);
  return std::make_unique<FlashInferStepKernels>(shape, *kernel_dtype(dtype), device);
}

}  // namespace hotswap::model_loader::kernels
