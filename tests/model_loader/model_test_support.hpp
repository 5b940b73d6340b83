// Helpers for the model_loader suites: tiny configs per architecture, synthetic checkpoints in
// temporary directories, and a plain reference forward written from the Hugging Face formulas
// (unfused q/k/v, no KV cache, rotate-half rotary, GQA), independent of LlamaModel's code.
#pragma once

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <numbers>
#include <thread>
#include <vector>

#include "model_loader/architecture_registry.hpp"
#include "model_loader/architectures/llama_model.hpp"
#include "model_loader/checkpoint.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "test_support.hpp"
#include "transport/gloo_communicator.hpp"

namespace hotswap::testing {

inline model_loader::ModelConfig tiny_config(std::string_view arch,
                                             protocol::DType dtype = protocol::DType::kFloat32) {
  model_loader::ModelConfig c;
  c.architecture = arch;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 64;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = dtype;
  namespace names = model_loader::architectures;
  if (arch == names::kQwen2) {
    c.qkv_bias = true;
  } else if (arch == names::kQwen3) {
    c.qk_norm = true;
    c.head_dim = 16;  // apart from hidden_size / heads
  } else if (arch == names::kMistral) {
    c.sliding_window = 3;
  } else if (arch == names::kQwen3Moe) {
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 24;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {1};  // layer 0 sparse, layer 1 dense
  } else if (arch == names::kMixtral) {
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.sliding_window = 3;
  } else if (arch == names::kLlama) {
    c.rope_scaling = model_loader::Llama3RopeScaling{8.0, 1.0, 4.0, 8};
    c.rope_theta = 500000.0;
  }
  // Round-trip through config.json so the test model is exactly what a file would give.
  return model_loader::ModelConfig::from_json(c.to_json());
}

// A tiny Qwen2 whose vocabulary holds the golden qwen2 tokenizer's ids
// (tests/golden/tokenizer/qwen2), with room for prompts of a few hundred tokens: for the tests
// that serve text.
inline model_loader::ModelConfig tiny_text_config() {
  auto c = tiny_config(model_loader::architectures::kQwen2);
  c.vocab_size = 512;
  c.max_position_embeddings = 512;
  return c;
}

// A synthetic checkpoint in a fresh directory.
struct CheckpointDir {
  TempDir dir;
  model_loader::ModelConfig config;
  CheckpointDir(const model_loader::ModelConfig& c, std::uint64_t seed) : config(c) {
    model_loader::SyntheticCheckpointOptions options;
    options.seed = seed;
    options.scale = 3.0;  // peaked logits: clear greedy margins
    model_loader::write_synthetic_checkpoint(dir.path, c, options);
  }
  model_loader::Checkpoint open() const { return model_loader::Checkpoint::open(dir.path); }
  std::shared_ptr<model_loader::ServableModel> load(model_loader::ModelOptions options = {}) const {
    return model_loader::load_model(dir.path, options);
  }
  // Every tensor of the checkpoint, as (name, tensor) in file order.
  std::vector<model_loader::NamedTensor> tensors() const {
    auto ckpt = open();
    std::vector<model_loader::NamedTensor> out;
    for (const auto& name : ckpt.names())
      out.emplace_back(name, ckpt.tensor(name).clone());
    return out;
  }
};

// The largest elementwise difference of two tensors of one shape, in float64.
inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

inline at::Tensor long_tensor(const std::vector<std::int64_t>& ids) {
  return at::tensor(ids, at::TensorOptions().dtype(at::kLong));
}

// Logits of every position [T, vocab], float32, from the Hugging Face formulas.
inline at::Tensor reference_logits(const model_loader::Checkpoint& ckpt,
                                   const model_loader::ModelConfig& c,
                                   const std::vector<std::int64_t>& ids) {
  auto w = [&](const std::string& name) { return ckpt.tensor(name).to(at::kFloat); };
  auto rms = [&](const at::Tensor& x, const at::Tensor& weight) {
    return weight * (x * at::rsqrt(x.pow(2).mean(-1, true) + c.rms_norm_eps));
  };
  const std::int64_t t = static_cast<std::int64_t>(ids.size()), hd = c.head_dim;
  const std::int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads;

  // Rotary angles, computed in double from the definitions.
  std::vector<float> cos_values, sin_values;
  for (std::int64_t pos = 0; pos < t; ++pos) {
    for (int half = 0; half < 2; ++half) {
      for (std::int64_t i = 0; i < hd / 2; ++i) {
        double freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / hd);
        if (c.rope_scaling) {
          const auto& s = *c.rope_scaling;
          double wavelen = 2 * std::numbers::pi / freq;
          double low = s.original_max_position_embeddings / s.low_freq_factor;
          double high = s.original_max_position_embeddings / s.high_freq_factor;
          if (wavelen > low) {
            freq /= s.factor;
          } else if (wavelen >= high) {
            double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
            freq = (1 - smooth) * freq / s.factor + smooth * freq;
          }
        }
        cos_values.push_back(static_cast<float>(std::cos(pos * freq)));
        sin_values.push_back(static_cast<float>(std::sin(pos * freq)));
      }
    }
  }
  at::Tensor cos = at::tensor(cos_values).reshape({t, 1, hd});
  at::Tensor sin = at::tensor(sin_values).reshape({t, 1, hd});
  auto rotate_half = [&](const at::Tensor& x) {
    return at::cat({-x.narrow(-1, hd / 2, hd / 2), x.narrow(-1, 0, hd / 2)}, -1);
  };

  at::Tensor x = w("model.embed_tokens.weight").index_select(0, long_tensor(ids));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor h = rms(x, w(p + "input_layernorm.weight"));
    at::Tensor q = at::matmul(h, w(p + "self_attn.q_proj.weight").t());
    at::Tensor k = at::matmul(h, w(p + "self_attn.k_proj.weight").t());
    at::Tensor v = at::matmul(h, w(p + "self_attn.v_proj.weight").t());
    if (c.qkv_bias) {
      q = q + w(p + "self_attn.q_proj.bias");
      k = k + w(p + "self_attn.k_proj.bias");
      v = v + w(p + "self_attn.v_proj.bias");
    }
    q = q.reshape({t, nh, hd});
    k = k.reshape({t, nkv, hd});
    v = v.reshape({t, nkv, hd});
    if (c.qk_norm) {
      q = rms(q, w(p + "self_attn.q_norm.weight"));
      k = rms(k, w(p + "self_attn.k_norm.weight"));
    }
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    std::vector<at::Tensor> heads;
    for (std::int64_t head = 0; head < nh; ++head) {
      std::int64_t kv = head / (nh / nkv);
      at::Tensor qh = q.select(1, head), kh = k.select(1, kv), vh = v.select(1, kv);
      at::Tensor scores = at::matmul(qh, kh.t()) / std::sqrt(static_cast<double>(hd));
      for (std::int64_t i = 0; i < t; ++i) {
        for (std::int64_t j = 0; j < t; ++j) {
          bool future = j > i;
          bool outside = c.sliding_window && i - j >= *c.sliding_window;
          if (future || outside) scores[i][j] = -INFINITY;
        }
      }
      heads.push_back(at::matmul(at::softmax(scores, -1), vh));
    }
    at::Tensor attn = at::cat(heads, -1);
    at::Tensor o = at::matmul(attn, w(p + "self_attn.o_proj.weight").t());
    if (c.o_proj_bias) o = o + w(p + "self_attn.o_proj.bias");
    x = x + o;
    h = rms(x, w(p + "post_attention_layernorm.weight"));
    at::Tensor gate = at::matmul(h, w(p + "mlp.gate_proj.weight").t());
    at::Tensor up = at::matmul(h, w(p + "mlp.up_proj.weight").t());
    x = x + at::matmul(at::silu(gate) * up, w(p + "mlp.down_proj.weight").t());
  }
  x = rms(x, w("model.norm.weight"));
  at::Tensor head = c.tie_word_embeddings ? w("model.embed_tokens.weight") : w("lm_head.weight");
  return at::matmul(x, head.t());
}

// The model's logits of every position of one sequence, without keeping the cache.
inline at::Tensor model_logits(const model_loader::ServableModel& model,
                               const std::vector<std::int64_t>& ids) {
  model_loader::KvCache cache;
  std::vector<model_loader::ForwardSlice> slices{{&cache, static_cast<std::int64_t>(ids.size())}};
  return model.forward(long_tensor(ids), slices, /*all_positions=*/true);
}

// Runs `body(rank, group)` on `size` threads, each a rank of one gloo group; rethrows the first
// exception any rank raised once all have returned.
inline void on_ranks(
    int size, const std::function<void(int, std::shared_ptr<transport::Communicator>)>& body) {
  const int port = transport::pick_free_port();
  std::vector<std::thread> threads;
  std::exception_ptr failure;
  std::mutex mutex;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto group = std::make_shared<transport::GlooCommunicator>(
            transport::GlooRendezvous{"127.0.0.1", port, r, size, std::chrono::seconds(20)});
        body(r, group);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& t : threads)
    t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace hotswap::testing
