// ServingContext: what the serving routes (each folder under worker/routes/) reach of the worker:
// its scheduler and completions, its tokenizer and chat templates, the adapters it serves, and
// the flags that decide how they answer. The WorkerService owns the parts and this context, and
// both outlive the route table.
#pragma once

#include <chrono>
#include <string>

#include "model_loader/model_config.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"
#include "worker/routes/chat_completions/chat_templates.hpp"
#include "worker/routes/completions/completion_service.hpp"
#include "worker/serving/generation_scheduler.hpp"
#include "worker/serving/lora_registry.hpp"

namespace hotswap::worker {

struct ServingContext {
  GenerationScheduler& scheduler;
  CompletionService& completions;
  const ChatTemplates& chat_templates;
  const LoraRegistry& loras;
  const model_loader::ModelConfig& config;
  // The model directory's tokenizer; null when the worker serves token ids only, and then
  // `no_tokenizer` says why (--skip-tokenizer-init, or no tokenizer.json).
  const model_loader::Tokenizer* tokenizer = nullptr;
  std::string no_tokenizer;
  std::string model_root;                    // the model's directory, as /v1/models shows it
  std::chrono::milliseconds timeout{0};      // every generation ends by then (--timeout)
  bool trust_request_chat_template = false;  // vLLM's --trust-request-chat-template

  // The tokenizer; RuntimeError saying why when there is none.
  const model_loader::Tokenizer& require_tokenizer() const;
};

}  // namespace hotswap::worker
