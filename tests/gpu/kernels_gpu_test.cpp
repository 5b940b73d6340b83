// FlashInfer's kernels (model_loader/kernels/flashinfer_kernels.hpp) on a GPU, each against the
// same math in float32 libtorch: RMSNorm and its fused residual add, SiLU-and-mul, rotary from a
// cos/sin table, KV append with decode attention (grouped-query, with and without a sliding
// window), ragged causal prefill attention, and seeded sampling. Skipped without a GPU or where
// the kernels were not built.
#include <boost/test/unit_test.hpp>

#include <ATen/Context.h>
#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/einsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/outer.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "model_loader/kernels/flashinfer_kernels.hpp"
#include "needs_gpus.hpp"

using namespace hotswap;
using namespace hotswap::model_loader::kernels;
using at::indexing::Slice;

namespace {

at::TensorOptions on_gpu(c10::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(c10::Device(c10::kCUDA, 0));
}

StreamHandle stream() {
  return c10::cuda::getCurrentCUDAStream(0).stream();
}

void check(KernelStatus status, const char* what) {
  BOOST_REQUIRE_MESSAGE(status == 0, what << ": " << describe_kernel_status(status));
}

// Skips a case (not the suite) where the kernels were not built: the GPU suites around still run.
bool kernels_here() {
  if (!kernels_built()) BOOST_TEST_MESSAGE("hotswap_kernels was built without the kernels");
  return kernels_built();
}

at::Tensor reference_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor f = x.to(at::kFloat);
  return f * at::rsqrt(f.pow(2).mean({-1}, true) + eps) * weight.to(at::kFloat);
}

struct Workspace {
  at::Tensor float_buffer =
      at::empty({static_cast<std::int64_t>(kAttentionFloatWorkspaceBytes)}, on_gpu(at::kByte));
  at::Tensor int_buffer =
      at::empty({static_cast<std::int64_t>(kAttentionIntWorkspaceBytes)}, on_gpu(at::kByte));
  at::Tensor pinned = at::empty({static_cast<std::int64_t>(kAttentionIntWorkspaceBytes)},
                                at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  AttentionWorkspace view() {
    return AttentionWorkspace{float_buffer.data_ptr(), kAttentionFloatWorkspaceBytes,
                              int_buffer.data_ptr(), pinned.data_ptr(),
                              kAttentionIntWorkspaceBytes};
  }
};

// Sequence s's keys and values, [length, kv_heads, head_dim], laid into pages of `page` positions
// (sequence s's pages follow each other), and what the kernels need to find them.
struct PagedSequences {
  at::Tensor keys, values;  // [pages, page, kv_heads, head_dim], bf16
  std::vector<at::Tensor> k, v;
  std::vector<std::int32_t> indptr{0}, indices, last_len;
  at::Tensor indptr_gpu, indices_gpu, last_len_gpu;
  PagedKvView view(std::uint32_t kv_heads, std::uint32_t page, std::uint32_t head_dim) {
    return PagedKvView{keys.data_ptr(),
                       values.data_ptr(),
                       indices_gpu.data_ptr<std::int32_t>(),
                       indptr_gpu.data_ptr<std::int32_t>(),
                       last_len_gpu.data_ptr<std::int32_t>(),
                       static_cast<std::uint32_t>(k.size()),
                       kv_heads,
                       page,
                       head_dim};
  }
};

PagedSequences paged(const std::vector<std::int64_t>& lengths, std::int64_t kv_heads,
                     std::int64_t page, std::int64_t head_dim) {
  PagedSequences p;
  std::int64_t pages = 0;
  for (std::int64_t length : lengths)
    pages += (length + page - 1) / page;
  p.keys = at::zeros({pages, page, kv_heads, head_dim}, on_gpu(at::kBFloat16));
  p.values = at::zeros_like(p.keys);
  std::int64_t next = 0;
  for (std::int64_t length : lengths) {
    at::Tensor k = at::randn({length, kv_heads, head_dim}, on_gpu(at::kFloat)).to(at::kBFloat16);
    at::Tensor v = at::randn({length, kv_heads, head_dim}, on_gpu(at::kFloat)).to(at::kBFloat16);
    const std::int64_t used = (length + page - 1) / page;
    for (std::int64_t i = 0; i < used; ++i) {
      const std::int64_t from = i * page, n = std::min(page, length - from);
      p.keys[next + i].narrow(0, 0, n).copy_(k.narrow(0, from, n));
      p.values[next + i].narrow(0, 0, n).copy_(v.narrow(0, from, n));
      p.indices.push_back(static_cast<std::int32_t>(next + i));
    }
    next += used;
    p.indptr.push_back(static_cast<std::int32_t>(next));
    p.last_len.push_back(static_cast<std::int32_t>(length - (used - 1) * page));
    p.k.push_back(k);
    p.v.push_back(v);
  }
  auto to_gpu = [](const std::vector<std::int32_t>& values) {
    return at::tensor(values, at::TensorOptions().dtype(at::kInt)).to(c10::Device(c10::kCUDA, 0));
  };
  p.indptr_gpu = to_gpu(p.indptr);
  p.indices_gpu = to_gpu(p.indices);
  p.last_len_gpu = to_gpu(p.last_len);
  return p;
}

// Softmax attention of q [rows, heads, d] at positions first .. first + rows - 1 over k, v
// [length, kv_heads, d], causal, keys within `window` positions before a query (-1: all).
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               std::int64_t first, std::int64_t window) {
  const std::int64_t heads = q.size(1), kv_heads = k.size(1), group = heads / kv_heads;
  const at::Tensor kf = k.to(at::kFloat).repeat_interleave(group, 1);  // [length, heads, d]
  const at::Tensor vf = v.to(at::kFloat).repeat_interleave(group, 1);
  at::Tensor scores = at::einsum("qhd,khd->hqk", {q.to(at::kFloat), kf}) /
                      std::sqrt(static_cast<double>(q.size(2)));
  const at::Tensor query_pos = at::arange(first, first + q.size(0), on_gpu(at::kLong)).unsqueeze(1);
  const at::Tensor key_pos = at::arange(k.size(0), on_gpu(at::kLong)).unsqueeze(0);
  at::Tensor hidden = key_pos > query_pos;
  if (window >= 0) hidden = hidden | (key_pos < query_pos - window);
  scores = scores.masked_fill(hidden.unsqueeze(0), -INFINITY);
  return at::einsum("hqk,khd->qhd", {at::softmax(scores, -1), vf});
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(kernels_gpu, testing::NeedsGpus<1>)

BOOST_AUTO_TEST_CASE(rms_norm_and_its_fused_residual_add_match_libtorch) {
  if (!kernels_here()) return;
  const at::Tensor x = at::randn({7, 4096}, on_gpu(at::kFloat)).to(at::kBFloat16);
  const at::Tensor w = at::randn({4096}, on_gpu(at::kFloat)).to(at::kBFloat16);
  at::Tensor out = at::empty_like(x);
  check(rms_norm(KernelDType::kBFloat16, x.data_ptr(), w.data_ptr(), out.data_ptr(), 7, 4096, 1e-6f,
                 stream()),
        "rms_norm");
  BOOST_TEST(at::allclose(out.to(at::kFloat), reference_rms_norm(x, w, 1e-6), 2e-2, 2e-2));

  at::Tensor input = at::randn({7, 4096}, on_gpu(at::kFloat)).to(at::kBFloat16);
  at::Tensor residual = at::randn({7, 4096}, on_gpu(at::kFloat)).to(at::kBFloat16);
  const at::Tensor summed = input.to(at::kFloat) + residual.to(at::kFloat);
  check(fused_add_rms_norm(KernelDType::kBFloat16, input.data_ptr(), residual.data_ptr(),
                           w.data_ptr(), 7, 4096, 1e-6f, stream()),
        "fused_add_rms_norm");
  BOOST_TEST(at::allclose(residual.to(at::kFloat), summed, 2e-2, 2e-2));
  BOOST_TEST(at::allclose(input.to(at::kFloat), reference_rms_norm(summed, w, 1e-6), 3e-2, 3e-2));
}

BOOST_AUTO_TEST_CASE(silu_and_mul_matches_libtorch_at_odd_widths) {
  if (!kernels_here()) return;
  for (std::int64_t width : {14336, 3420, 7}) {  // 3420: only 4-element vectors divide it
    const at::Tensor gate_up = at::randn({5, 2 * width}, on_gpu(at::kFloat)).to(at::kHalf);
    at::Tensor out = at::empty({5, width}, on_gpu(at::kHalf));
    check(silu_and_mul(KernelDType::kFloat16, gate_up.data_ptr(), out.data_ptr(), 5,
                       static_cast<std::uint32_t>(width), stream()),
          "silu_and_mul");
    const at::Tensor f = gate_up.to(at::kFloat);
    const at::Tensor expected = at::silu(f.narrow(1, 0, width)) * f.narrow(1, width, width);
    BOOST_TEST(at::allclose(out.to(at::kFloat), expected, 1e-2, 1e-2), width);
  }
}

BOOST_AUTO_TEST_CASE(rotary_from_a_cos_sin_table_matches_rotate_half) {
  if (!kernels_here()) return;
  const std::int64_t tokens = 6, heads = 8, kv_heads = 2, dim = 128, positions = 64;
  const at::Tensor inv_freq =
      at::pow(10000.0, at::arange(0, dim, 2, on_gpu(at::kFloat)) / static_cast<double>(dim))
          .reciprocal();
  const at::Tensor angles = at::outer(at::arange(positions, on_gpu(at::kFloat)), inv_freq);
  const at::Tensor table = at::cat({at::cos(angles), at::sin(angles)}, 1).contiguous();
  const at::Tensor pos = at::tensor(std::vector<std::int32_t>{0, 1, 5, 17, 40, 63},
                                    at::TensorOptions().dtype(at::kInt))
                             .to(c10::Device(c10::kCUDA, 0));
  at::Tensor q = at::randn({tokens, heads, dim}, on_gpu(at::kFloat)).to(at::kBFloat16);
  at::Tensor k = at::randn({tokens, kv_heads, dim}, on_gpu(at::kFloat)).to(at::kBFloat16);
  auto rotated = [&](const at::Tensor& x) {
    const at::Tensor a = angles.index({pos.to(at::kLong)}).unsqueeze(1);  // [tokens, 1, dim/2]
    const at::Tensor c = at::cat({at::cos(a), at::cos(a)}, -1),
                     s = at::cat({at::sin(a), at::sin(a)}, -1);
    const at::Tensor f = x.to(at::kFloat);
    const at::Tensor half =
        at::cat({-f.narrow(-1, dim / 2, dim / 2), f.narrow(-1, 0, dim / 2)}, -1);
    return f * c + half * s;
  };
  const at::Tensor q_expected = rotated(q), k_expected = rotated(k);
  check(apply_rotary(KernelDType::kBFloat16, q.data_ptr(), k.data_ptr(), table.data_ptr<float>(),
                     pos.data_ptr<std::int32_t>(), tokens, heads, kv_heads, dim, dim, stream()),
        "apply_rotary");
  BOOST_TEST(at::allclose(q.to(at::kFloat), q_expected, 2e-2, 2e-2));
  BOOST_TEST(at::allclose(k.to(at::kFloat), k_expected, 2e-2, 2e-2));
}

BOOST_AUTO_TEST_CASE(decode_attention_over_pages_matches_libtorch_with_and_without_a_window) {
  if (!kernels_here()) return;
  const std::int64_t heads = 32, kv_heads = 8, dim = 128, page = 16;
  const std::vector<std::int64_t> lengths{1, 17, 300, 64};
  PagedSequences seqs = paged(lengths, kv_heads, page, dim);
  Workspace workspace;
  const at::Tensor q = at::randn({4, heads, dim}, on_gpu(at::kFloat)).to(at::kBFloat16);
  for (std::int32_t window : {-1, 31}) {
    AttentionShape shape{KernelDType::kBFloat16,  heads, kv_heads, dim, page, window,
                         1.0f / std::sqrt(128.0f)};
    AttentionPlan plan;
    check(plan_decode(shape, workspace.view(), seqs.indptr.data(), 4, false, plan, stream()),
          "plan_decode");
    at::Tensor out = at::empty_like(q);
    check(run_decode(shape, workspace.view(), plan, q.data_ptr(), seqs.view(kv_heads, page, dim),
                     out.data_ptr(), stream()),
          "run_decode");
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const std::int64_t last = lengths[s] - 1;
      const at::Tensor expected = reference_attention(q.narrow(0, static_cast<std::int64_t>(s), 1),
                                                      seqs.k[s], seqs.v[s], last, window);
      BOOST_TEST(
          at::allclose(out[static_cast<std::int64_t>(s)].to(at::kFloat), expected[0], 2e-2, 2e-2),
          "sequence " << s << " window " << window);
    }
  }
}

BOOST_AUTO_TEST_CASE(appended_keys_are_where_decode_reads_them) {
  if (!kernels_here()) return;
  const std::int64_t kv_heads = 2, dim = 64, page = 16;
  PagedSequences seqs = paged({20, 5}, kv_heads, page, dim);
  // Overwrite position 19 of sequence 0 and position 4 of sequence 1 through the kernel.
  const at::Tensor k = at::randn({2, kv_heads, dim}, on_gpu(at::kFloat)).to(at::kHalf);
  const at::Tensor v = at::randn({2, kv_heads, dim}, on_gpu(at::kFloat)).to(at::kHalf);
  at::Tensor keys = seqs.keys.to(at::kHalf), values = seqs.values.to(at::kHalf);
  PagedKvView view = seqs.view(kv_heads, page, dim);
  view.keys = keys.data_ptr();
  view.values = values.data_ptr();
  const at::Tensor rows =
      at::tensor(std::vector<std::int32_t>{0, 1}, at::TensorOptions().dtype(at::kInt))
          .to(c10::Device(c10::kCUDA, 0));
  const at::Tensor positions =
      at::tensor(std::vector<std::int32_t>{19, 4}, at::TensorOptions().dtype(at::kInt))
          .to(c10::Device(c10::kCUDA, 0));
  check(append_paged_kv(KernelDType::kFloat16, view, k.data_ptr(), v.data_ptr(),
                        rows.data_ptr<std::int32_t>(), positions.data_ptr<std::int32_t>(), 2,
                        stream()),
        "append_paged_kv");
  // Sequence 0's pages are 0 and 1 (position 19: page 1, slot 3); sequence 1's is page 2.
  BOOST_TEST(at::equal(keys[1][3], k[0]));
  BOOST_TEST(at::equal(values[2][4], v[1]));
}

BOOST_AUTO_TEST_CASE(ragged_causal_prefill_matches_libtorch) {
  if (!kernels_here()) return;
  const std::int64_t heads = 16, kv_heads = 4, dim = 128, page = 16;
  // Sequence 0 prefills all of its 40 positions; sequence 1 its last 7 of 100 (a chunk after a
  // cached prefix).
  const std::vector<std::int64_t> lengths{40, 100};
  const std::vector<std::int64_t> new_rows{40, 7};
  PagedSequences seqs = paged(lengths, kv_heads, page, dim);
  Workspace workspace;
  const at::Tensor q = at::randn({47, heads, dim}, on_gpu(at::kFloat)).to(at::kBFloat16);
  const std::vector<std::int32_t> q_indptr{0, 40, 47};
  const at::Tensor q_indptr_gpu =
      at::tensor(q_indptr, at::TensorOptions().dtype(at::kInt)).to(c10::Device(c10::kCUDA, 0));
  AttentionShape shape{KernelDType::kBFloat16,  heads, kv_heads, dim, page, -1,
                       1.0f / std::sqrt(128.0f)};
  AttentionPlan plan;
  check(plan_prefill(shape, workspace.view(), q_indptr.data(), seqs.indptr.data(), 2, 47, false,
                     plan, stream()),
        "plan_prefill");
  at::Tensor out = at::empty_like(q);
  check(run_prefill(shape, workspace.view(), plan, q.data_ptr(),
                    q_indptr_gpu.data_ptr<std::int32_t>(), seqs.view(kv_heads, page, dim),
                    out.data_ptr(), stream()),
        "run_prefill");
  for (std::size_t s = 0; s < 2; ++s) {
    const std::int64_t from = q_indptr[s], n = new_rows[s];
    const at::Tensor expected =
        reference_attention(q.narrow(0, from, n), seqs.k[s], seqs.v[s], lengths[s] - n, -1);
    BOOST_TEST(at::allclose(out.narrow(0, from, n).to(at::kFloat), expected, 2e-2, 2e-2), s);
  }
}

BOOST_AUTO_TEST_CASE(sampling_is_seeded_per_row_and_filters_as_asked) {
  if (!kernels_here()) return;
  const std::int64_t rows = 4, vocab = 32000;
  const at::Tensor probs = at::softmax(at::randn({rows, vocab}, on_gpu(at::kFloat)) * 3, -1);
  auto ints = [](std::vector<std::int32_t> v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kInt)).to(c10::Device(c10::kCUDA, 0));
  };
  auto floats = [](std::vector<float> v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kFloat)).to(c10::Device(c10::kCUDA, 0));
  };
  auto longs = [](std::vector<std::int64_t> v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(c10::Device(c10::kCUDA, 0));
  };
  const at::Tensor top_k = ints({1, 0, 50, 0}), top_p = floats({1.f, 1.f, 0.9f, 0.5f});
  const at::Tensor seeds = longs({1, 2, 3, 4}), offsets = longs({0, 0, 0, 0});
  auto draw = [&] {
    at::Tensor tokens = at::empty({rows}, on_gpu(at::kInt));
    check(sample_top_k_top_p(
              probs.data_ptr<float>(), top_k.data_ptr<std::int32_t>(), top_p.data_ptr<float>(),
              reinterpret_cast<const std::uint64_t*>(seeds.data_ptr<std::int64_t>()),
              reinterpret_cast<const std::uint64_t*>(offsets.data_ptr<std::int64_t>()),
              tokens.data_ptr<std::int32_t>(), rows, vocab, stream()),
          "sample_top_k_top_p");
    return tokens;
  };
  const at::Tensor first = draw(), again = draw();
  BOOST_TEST(at::equal(first, again), "the same seeds and offsets draw the same tokens");
  BOOST_TEST(first[0].item<std::int32_t>() == at::argmax(probs[0]).item<std::int64_t>(),
             "top_k 1 is greedy");
  at::Tensor min_p_tokens = at::empty({rows}, on_gpu(at::kInt));
  const at::Tensor min_p = floats({1.f, 1.f, 1.f, 1.f});
  check(sample_min_p(probs.data_ptr<float>(), min_p.data_ptr<float>(),
                     reinterpret_cast<const std::uint64_t*>(seeds.data_ptr<std::int64_t>()),
                     reinterpret_cast<const std::uint64_t*>(offsets.data_ptr<std::int64_t>()),
                     min_p_tokens.data_ptr<std::int32_t>(), rows, vocab, stream()),
        "sample_min_p");
  BOOST_TEST(at::equal(min_p_tokens.to(at::kLong), at::argmax(probs, -1)), "min_p 1 is greedy");
}

BOOST_AUTO_TEST_SUITE_END()
