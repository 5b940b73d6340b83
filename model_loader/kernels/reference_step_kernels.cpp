// The libtorch reference of StepKernels: what FlashInfer's kernels compute, from the same
// metadata, in float32 where they accumulate in float32. It stands in for them without a GPU; it
// is written for clarity, not speed (attention loops over the sequences on the host).
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/einsum.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>
#include <limits>

#include "model_loader/kernels/step_kernels.hpp"

namespace hotswap::model_loader::kernels {
namespace {

class ReferenceStepKernels final : public StepKernels {
 public:
  explicit ReferenceStepKernels(StepKernelShape shape) : shape_(std::move(shape)) {}

  void plan(const KernelStepInputs&, bool) override {}  // nothing to plan

  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) override {
    at::Tensor h = x.to(at::kFloat);
    h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + shape_.eps);
    return (h * weight.to(at::kFloat)).to(x.scalar_type());
  }

  void add_rms_norm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight) override {
    residual.add_(x);
    x.copy_(rms_norm(residual, weight));
  }

  at::Tensor silu_and_mul(const at::Tensor& gate_up) override {
    const std::int64_t width = gate_up.size(1) / 2;
    return at::silu(gate_up.narrow(1, 0, width)) * gate_up.narrow(1, width, width);
  }

  void rotate(at::Tensor& q, at::Tensor& k, const KernelStepInputs& step) override {
    if (!shape_.cos_sin.defined()) return;
    const std::int64_t half = shape_.head_dim / 2;
    at::Tensor angles = shape_.cos_sin.index_select(0, step.positions.to(at::kLong)).unsqueeze(1);
    at::Tensor cos = angles.narrow(2, 0, half), sin = angles.narrow(2, half, half);
    for (at::Tensor* x : {&q, &k}) {
      at::Tensor f = x->to(at::kFloat);
      at::Tensor x1 = f.narrow(2, 0, half), x2 = f.narrow(2, half, half);
      x->copy_(at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, 2));
    }
  }

  void append_kv(const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_pages,
                 const at::Tensor& value_pages, const KernelStepInputs& step) override {
    const at::Tensor slots = slots_of(step);
    // The pool's tensors are written through their handles, as the kernel writes its pages.
    at::Tensor keys = key_pages, values = value_pages;
    keys.index_copy_(0, slots, k.to(keys.scalar_type()));
    values.index_copy_(0, slots, v.to(values.scalar_type()));
  }

  at::Tensor attention(const at::Tensor& q, const at::Tensor& key_pages,
                       const at::Tensor& value_pages, const KernelStepInputs& step) override {
    const std::int64_t bs = shape_.block_size;
    const std::int64_t group = shape_.q_heads / shape_.kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape_.head_dim));
    const at::Tensor pages = step.page_indices.to(at::kCPU);
    const at::Tensor last_len = step.last_page_len.to(at::kCPU);
    at::Tensor out = at::zeros_like(q);
    for (std::int64_t i = 0; i < step.sequences; ++i) {
      const auto s = static_cast<std::size_t>(i);
      const std::int64_t first_page = step.page_indptr_host[s];
      const std::int64_t n_pages = step.page_indptr_host[s + 1] - first_page;
      const std::int64_t length = (n_pages - 1) * bs + last_len[i].item<std::int64_t>();
      const std::int64_t first_row = step.q_indptr_host[s];
      const std::int64_t n_rows = step.q_indptr_host[s + 1] - first_row;
      // The sequence's slots in position order.
      at::Tensor slots = (pages.narrow(0, first_page, n_pages).to(at::kLong).unsqueeze(1) * bs +
                          at::arange(bs, at::kLong).unsqueeze(0))
                             .reshape({-1})
                             .narrow(0, 0, length)
                             .to(q.device());
      at::Tensor keys = key_pages.index_select(0, slots).to(at::kFloat);  // [L, kv, hd]
      at::Tensor values = value_pages.index_select(0, slots).to(at::kFloat);
      keys = keys.repeat_interleave(group, 1);  // query head h reads KV head h / group
      values = values.repeat_interleave(group, 1);
      at::Tensor queries = q.narrow(0, first_row, n_rows).to(at::kFloat);
      at::Tensor scores = at::einsum("qhd,khd->hqk", {queries, keys}) * scale;
      // The rows are the sequence's newest positions: length - n_rows .. length - 1.
      at::Tensor query_pos = at::arange(length - n_rows, length, at::kLong).unsqueeze(1);
      at::Tensor key_pos = at::arange(length, at::kLong).unsqueeze(0);
      at::Tensor hidden = key_pos > query_pos;
      if (shape_.sliding_window) hidden = hidden | (key_pos <= query_pos - *shape_.sliding_window);
      scores = scores.masked_fill(hidden.to(q.device()).unsqueeze(0),
                                  -std::numeric_limits<float>::infinity());
      at::Tensor probs = at::softmax(scores, -1);
      out.narrow(0, first_row, n_rows)
          .copy_(at::einsum("hqk,khd->qhd", {probs, values}).to(q.scalar_type()));
    }
    return out;
  }

 private:
  // The pool slot of each row's key and value.
  at::Tensor slots_of(const KernelStepInputs& step) const {
    const std::int64_t bs = shape_.block_size;
    at::Tensor pos = step.positions.to(at::kLong);
    at::Tensor entry =
        step.page_indptr.to(at::kLong).index_select(0, step.sequence_of.to(at::kLong)) +
        at::floor_divide(pos, bs);
    return step.page_indices.to(at::kLong).index_select(0, entry) * bs + pos.remainder(bs);
  }

  StepKernelShape shape_;
};

}  // namespace

std::unique_ptr<StepKernels> make_reference_step_kernels(const StepKernelShape& shape) {
  return std::make_unique<ReferenceStepKernels>(shape);
}

}  // namespace hotswap::model_loader::kernels
