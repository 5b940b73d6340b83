#include "worker/worker_options.hpp"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>

#include "model_loader/servable_model.hpp"
#include "protocol/control_methods.hpp"
#include "protocol/dtype.hpp"
#include "protocol/errors.hpp"
#include "transport/device.hpp"
#include "worker/device_plan.hpp"

namespace hotswap::worker {

WorkerOptions WorkerOptions::parse(int argc, char** argv) {
  WorkerOptions o;
  CLI::App app{
      "hotswap-worker: an inference worker an RL trainer pushes weights into while it "
      "runs (vLLM's weight-transfer contract over ZeroMQ JSON-RPC and HTTP)"};
  std::string transfer_config, update_mode = "staged";
  // The control-method table as JSON, for clients in other languages (the Python client's test
  // checks its methods against it). Answered before --model is required, as --help is.
  app.add_flag_callback(
         "--control-methods",
         [] {
           std::cout << protocol::control_methods_json().dump(2) << "\n";
           throw CLI::Success();
         },
         "print every control method (name, HTTP route, long or short, metric) as JSON and exit")
      ->trigger_on_parse();
  app.add_option("--model", o.model, "Hugging Face checkpoint directory")->required();
  app.add_option("--device", o.device, "cpu | cuda:N");
  app.add_option("--dtype", o.dtype, "float32 | bfloat16 | float16 (default: the checkpoint's)");
  app.add_option("--quantization", o.quantization, "int8: weight-only, per output channel");
  app.add_option("--control", o.control, "ZeroMQ endpoint of the JSON-RPC control socket")
      ->capture_default_str();
  app.add_option("--http-port", o.http_port, "serve vLLM's HTTP routes on this port (off: 0)");
  app.add_option("--http-host", o.http_host, "address the HTTP routes bind to")
      ->capture_default_str();
  app.add_option("--weight-transfer-config", transfer_config,
                 "vLLM's flag, e.g. '{\"backend\": \"disk\"}'");
  app.add_option("--update-mode", update_mode, "staged | inplace")->capture_default_str();
  app.add_option("--data-parallel-rank", o.data_parallel_rank);
  app.add_option("--data-parallel-size", o.data_parallel_size);
  app.add_option("--timeout", o.timeout_seconds, "seconds for every blocking wait")
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "debug | info | warning | error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}))
      ->capture_default_str();
  app.add_option("--curve-secret-key-file", o.curve_secret_key_file,
                 "enable CURVE: this server's Z85 secret key (40 chars) in a file");
  app.add_option("--curve-authorized-keys", o.curve_authorized_keys,
                 "with CURVE: a directory of authorized clients' Z85 public keys, one per file");
  app.add_flag("--curve-allow-any-client", o.curve_allow_any_client,
               "with CURVE but no --curve-authorized-keys: encrypt, and accept any client key");
  app.add_option("--api-key", o.api_key,
                 "HTTP routes other than /health and /metrics require 'Authorization: Bearer "
                 "KEY' (default: $VLLM_API_KEY, as vLLM)");
  app.add_option("--max-request-bytes", o.max_request_bytes,
                 "largest control request or HTTP body accepted")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1024), std::size_t(1) << 40));
  app.add_flag("--skip-tokenizer-init", o.skip_tokenizer_init,
               "do not load the model's tokenizer.json: serve token ids only (as vLLM's flag)");
  app.add_option("--max-queued-requests", o.max_queued_requests,
                 "generate requests waiting for a batch slot, and long calls waiting for a "
                 "thread; past it, an overloaded error (HTTP 503)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 24));
  app.add_option("--served-model-name", o.served_model_name,
                 "the model name the OpenAI-compatible routes answer to (default: --model)");
  app.add_option("--chat-template", o.chat_template,
                 "the chat template of /v1/chat/completions: a file, or the template itself "
                 "(default: the model's chat_template.jinja or tokenizer_config.json's)");
  app.add_flag("--trust-request-chat-template", o.trust_request_chat_template,
               "render a request's own `chat_template` (refused otherwise, as vLLM)");
  app.add_flag("--enable-lora", o.enable_lora,
               "serve LoRA adapters: a request names one by its `model`");
  app.add_option("--max-loras", o.max_loras, "LoRA adapters loaded at once")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 10));
  // vLLM takes these ranks only.
  app.add_option("--max-lora-rank", o.max_lora_rank, "the highest rank of an adapter")
      ->capture_default_str()
      ->check(CLI::IsMember({1, 8, 16, 32, 64, 128, 256, 320, 512}));
  app.add_option("--lora-modules", o.lora_modules,
                 "adapters loaded at start-up: name=path, or "
                 "'{\"name\": ..., \"path\": ..., \"base_model_name\": ...}' (vLLM's forms)");
  app.add_option("--max-num-seqs", o.max_num_seqs,
                 "most sequences in one generation step (continuous batching)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 16));
  app.add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                 "most tokens one generation step computes (a prompt over it runs alone)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 24));
  app.add_option("--block-size", o.block_size,
                 "positions in one block of the paged KV cache (as vLLM's flag)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1024)));
  app.add_option("--kv-cache-memory-bytes", o.kv_cache_memory_bytes,
                 "bytes the KV cache's blocks may take on each rank, allocated as sequences "
                 "grow; when they run out, the latest sequences are preempted and recomputed "
                 "later (as vLLM's flag). On a GPU the default is what "
                 "--gpu-memory-utilization leaves")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t(1), std::uint64_t(1) << 44));
  app.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                 "on a GPU: the fraction of its memory this worker takes; the KV cache gets "
                 "what the weights, a staged update's shadow and a step's activations leave "
                 "(as vLLM's flag; ignored with --kv-cache-memory-bytes)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--attention-backend", o.attention_backend,
                 "on a GPU: FLASHINFER (its kernels, or a refusal naming why they cannot run the "
                 "model) or TORCH (libtorch's ops); unset, FlashInfer's where they can")
      ->check(CLI::IsMember({"FLASHINFER", "TORCH"}));
  app.add_option("--cuda-graph-sizes", o.cuda_graph_sizes,
                 "batch sizes decode steps are captured at as CUDA graphs (as vLLM's flag); "
                 "unset: 1, 2, 4, every multiple of 8 to 256, of 16 after, up to --max-num-seqs")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 16));
  app.add_flag("--enforce-eager", o.enforce_eager,
               "no CUDA graphs: every step launches its kernels eagerly (as vLLM's flag)");
  app.add_option("--http-threads", o.http_threads,
                 "HTTP requests handled at once; a streaming or waiting request holds one (idle "
                 "and slow connections hold none)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(4096)));
  app.add_option("--http-header-timeout", o.http_header_timeout_seconds,
                 "seconds an HTTP request's header may take to arrive, however it trickles "
                 "(an idle kept-alive connection closes after as long)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--http-body-timeout", o.http_body_timeout_seconds,
                 "seconds an HTTP request's body may take to arrive after its header")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--tensor-parallel-size", o.tensor_parallel_size,
                 "rank processes that share the model (vLLM's tensor parallelism); this one "
                 "serves and starts the others")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_flag("--enable-expert-parallel", o.enable_expert_parallel,
               "with --tensor-parallel-size: spread a mixture of experts' experts over the ranks, "
               "whole (vLLM's expert parallelism), rather than split each expert's width");
  app.add_option("--tensor-parallel-rank", o.tensor_parallel_rank,
                 "internal: set by rank 0 on the rank processes it starts")
      ->group("");
  app.add_option("--tensor-parallel-port", o.tensor_parallel_port,
                 "internal: the ranks' group port, set by rank 0")
      ->group("");
  for (int i = 1; i < argc; ++i)
    o.arguments.emplace_back(argv[i]);
  o.program = argc > 0 ? argv[0] : "hotswap-worker";
  try {
    app.parse(argc, argv);
    o.kv_cache_memory_bytes_given = app.count("--kv-cache-memory-bytes") > 0;
    if (o.tensor_parallel_rank < 0 || o.tensor_parallel_rank >= o.tensor_parallel_size) {
      throw CLI::ValidationError("--tensor-parallel-rank must be in 0..--tensor-parallel-size - 1");
    }
    o.update_mode = model_loader::update_mode_from_name(update_mode);
    if (!transfer_config.empty()) {
      o.weight_transfer_config = nlohmann::json::parse(transfer_config);
    }
    if (o.data_parallel_size < 1 || o.data_parallel_rank < 0 ||
        o.data_parallel_rank >= o.data_parallel_size) {
      throw CLI::ValidationError("--data-parallel-rank must be in 0..--data-parallel-size - 1");
    }
    if (!(o.timeout_seconds > 0) || o.timeout_seconds > 1e7) {
      throw CLI::ValidationError("--timeout must be a positive number of seconds");
    }
    if (o.api_key.empty()) {
      if (const char* env = std::getenv("VLLM_API_KEY")) o.api_key = env;
    }
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  } catch (const std::exception& e) {
    std::cerr << "hotswap-worker: " << e.what() << "\n";
    std::exit(2);
  }
  return o;
}

model_loader::ModelOptions model_options_for(const WorkerOptions& o) {
  model_loader::ModelOptions m;
  if (!o.dtype.empty()) m.dtype = protocol::dtype_from_name(o.dtype);
  if (!o.quantization.empty()) {
    if (o.quantization != "int8") {
      throw protocol::ValueError("unknown --quantization '" + o.quantization + "' (int8 is known)");
    }
    m.quantize_int8 = true;
  }
  m.update_mode = o.update_mode;
  m.device = transport::parse_device(o.device);
  // One device per tensor-parallel rank, from the plan, which refuses ranks past the machine's
  // last GPU: in rank 0, before it starts the others, rather than after its NCCL init times out.
  if (m.device.is_cuda()) {
    const auto ranks = plan_devices_on_this_machine({o.device}, o.tensor_parallel_size).front();
    m.device = transport::cuda_device(ranks.at(static_cast<std::size_t>(o.tensor_parallel_rank)));
  }
  m.collective_timeout = o.timeout();
  m.enable_expert_parallel = o.enable_expert_parallel;
  m.kv_block_size = o.block_size;
  m.kv_cache_memory_bytes = o.kv_cache_memory_bytes;
  // At tensor-parallel size 1 only: each rank would read its own device's free memory, and
  // ranks whose budgets differ in blocks would not run out together (a rank that cannot take a
  // block the others took fails the step). More ranks keep --kv-cache-memory-bytes.
  if (!o.kv_cache_memory_bytes_given && o.tensor_parallel_size == 1) {
    m.gpu_kv_cache = model_loader::ModelOptions::GpuKvCacheSizing{
        o.gpu_memory_utilization, static_cast<std::int64_t>(o.max_num_batched_tokens),
        static_cast<std::int64_t>(o.max_num_seqs)};
  }
  using model_loader::AttentionBackend;
  m.step_kernels.backend = o.attention_backend == "FLASHINFER" ? AttentionBackend::kFlashInfer
                           : o.attention_backend == "TORCH"    ? AttentionBackend::kTorch
                                                               : AttentionBackend::kAuto;
  m.step_kernels.cuda_graph_sizes = o.cuda_graph_sizes;
  m.step_kernels.enforce_eager = o.enforce_eager;
  m.step_kernels.max_num_seqs = static_cast<std::int64_t>(o.max_num_seqs);
  return m;
}

}  // namespace hotswap::worker
