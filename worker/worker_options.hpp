// WorkerOptions: hotswap-worker's command line (the flags are pinned: tests, the demo, the
// launcher and orchestrators rely on them).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_loader/layerwise_reload.hpp"
#include "protocol/timeouts.hpp"

namespace hotswap::model_loader {
struct ModelOptions;
}

namespace hotswap::worker {

struct WorkerOptions {
  std::string model;
  std::string device = "cpu";
  std::string dtype;         // empty: the checkpoint's
  std::string quantization;  // empty or "int8"
  std::string control = "tcp://127.0.0.1:5555";
  int http_port = 0;  // 0: no HTTP
  std::string http_host = "127.0.0.1";
  std::optional<nlohmann::json> weight_transfer_config;
  model_loader::UpdateMode update_mode = model_loader::UpdateMode::kStaged;
  int data_parallel_rank = 0;
  int data_parallel_size = 1;
  double timeout_seconds = protocol::kDefaultTimeoutSeconds;
  std::string log_level = "info";
  std::string curve_secret_key_file;
  std::string curve_authorized_keys;
  bool curve_allow_any_client = false;  // CURVE encryption without client authentication
  std::string api_key;                  // HTTP: Authorization: Bearer <key> (or VLLM_API_KEY)
  std::size_t max_request_bytes = 64u << 20;
  std::size_t max_queued_requests = 4096;
  bool skip_tokenizer_init = false;  // vLLM's flag: no tokenizer, token ids only
  std::string served_model_name;     // the `model` of the OpenAI routes; empty: --model
  // vLLM's --chat-template (a file, or the template itself) over the model's own; and whether a
  // request's `chat_template` is rendered (vLLM's --trust-request-chat-template: refused else).
  std::optional<std::string> chat_template;
  bool trust_request_chat_template = false;
  // LoRA adapters (vLLM's flags): served at all, how many at once, their highest rank, and those
  // loaded at start-up (`name=path` or vLLM's JSON form, one per entry).
  bool enable_lora = false;
  std::size_t max_loras = 1;
  std::int64_t max_lora_rank = 16;
  std::vector<std::string> lora_modules;
  std::size_t max_num_seqs = 64;              // sequences in one generation step
  std::size_t max_num_batched_tokens = 2048;  // tokens computed in one generation step
  // The paged KV cache: positions per block, and the bytes its blocks may take (per rank).
  std::int64_t block_size = 16;
  std::uint64_t kv_cache_memory_bytes = std::uint64_t{4} << 30;
  bool kv_cache_memory_bytes_given = false;  // explicitly: it then wins on a GPU too, as in vLLM
  // On a GPU: the fraction of the device this worker budgets (vLLM's flag); the KV cache takes
  // what the weights, a staged shadow and a step's activations leave of it.
  double gpu_memory_utilization = 0.9;
  // How a step runs on a GPU (vLLM's flags): the kernels (--attention-backend: empty picks
  // FlashInfer's where they can run the model), the batch sizes decode steps are captured at as
  // CUDA graphs (empty: vLLM's default list), and none at all (--enforce-eager).
  std::string attention_backend;
  std::vector<std::int64_t> cuda_graph_sizes;
  bool enforce_eager = false;
  std::size_t http_threads = 128;  // HTTP requests handled at once (a stream holds one)
  // Deadlines for an HTTP request's header (an idle kept-alive connection's wait included) and
  // for its body, however slowly the bytes arrive.
  double http_header_timeout_seconds = 10;
  double http_body_timeout_seconds = 60;
  // Tensor parallelism: this worker is `tensor_parallel_size` rank processes. Rank 0 (the
  // process started by hand) serves; it starts the others itself, with the same arguments and
  // the two below, which are not meant to be given by hand.
  int tensor_parallel_size = 1;
  // vLLM's --enable-expert-parallel: the ranks hold a sparse layer's experts whole, spread over
  // them, instead of a slice of each expert's width.
  bool enable_expert_parallel = false;
  int tensor_parallel_rank = 0;
  int tensor_parallel_port = 0;  // the loopback port of the ranks' gloo group (rank 0 hosts it)
  std::vector<std::string> arguments;  // argv[1..], for the rank processes rank 0 starts
  std::string program;                 // this binary, for the same

  std::chrono::milliseconds timeout() const { return protocol::to_milliseconds(timeout_seconds); }

  // Parses argv; prints help or a usage error and exits as CLI11 does.
  static WorkerOptions parse(int argc, char** argv);
};

// The model options the worker's flags ask for (device, dtype, quantization, update mode,
// timeouts); a tensor-parallel rank adds its group.
model_loader::ModelOptions model_options_for(const WorkerOptions& options);

}  // namespace hotswap::worker
