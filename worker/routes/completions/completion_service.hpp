// CompletionService: vLLM's OpenAI-compatible completions and chat completions on the worker's
// generation scheduler. A chat request is its conversation rendered by the model's chat template
// (ChatTemplates) and run as a completion of that prompt, answered in chat's shapes.
// A request (protocol::CompletionParams) becomes one scheduler request per prompt and per `n`;
// each choice detokenizes its tokens as they come (model_loader::IncrementalDetokenizer), ends
// at a stop string, and is answered whole or streamed chunk by chunk, in vLLM's response shapes.
// Asked (`return_weight_versions`, vLLM 0.34), every choice says which weight version produced
// which of its tokens (`weight_versions`: {version, start, end} half-open spans over its output
// tokens; streamed, in its last chunk), since a staged commit may land between two of its steps.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_loader/model_config.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"
#include "protocol/errors.hpp"
#include "protocol/method_params.hpp"
#include "worker/routes/chat_completions/chat_templates.hpp"
#include "worker/routes/route.hpp"
#include "worker/serving/generation_scheduler.hpp"
#include "worker/serving/lora_registry.hpp"

namespace hotswap::worker {

// One completion request in flight. Streamed: take() hands out each chunk as it is produced.
// Whole: wait() returns the response. Either way it ends by itself at the worker's timeout.
class CompletionRun : public PendingAnswer, public StreamedAnswer {
 public:
  struct Choice;
  // What a chat completion adds (vLLM's chat.completion and chat.completion.chunk shapes).
  struct Chat {
    std::string role = "assistant";  // of the reply
    std::string echo;  // with `echo`: the last message's text, before the reply's (same role)
    bool logprobs = false;
    std::int64_t top_logprobs = 0;
  };
  // `chat`: answered as a chat completion; none: as a text completion.
  CompletionRun(protocol::CompletionParams params, std::string model_name,
                std::optional<Chat> chat = std::nullopt);
  ~CompletionRun();

  bool streaming() const { return params_.stream; }
  // Streamed: waits up to `wait` for chunks (each a compact JSON text, to send as an SSE
  // `data:` line). `finished` becomes true once every choice has ended and its last chunk is
  // among those returned; the caller then sends `data: [DONE]`. Returning, it takes the
  // connection back from offer (below) until hand_back().
  std::vector<std::string> take(std::chrono::milliseconds wait, bool& finished) override;

  // Streamed over a connection the scheduler's thread may write to without waiting: `offer`
  // sends one chunk so and says whether all of it left. While the connection is handed to it
  // (hand_back(), after every take() that left nothing to write), each token's chunk is offered
  // as the step produces it and no thread is woken for it: at 64 streams on two cores, a wake
  // per token took the processor from the stepping thread 2,000 times a second. A chunk that
  // did not all leave (a slow client), or failed, wakes the waiting take() to finish the job
  // with blocking writes. attach(nullptr) before the connection goes; until attached, every
  // chunk waits for take().
  void attach(std::function<bool(const std::string& chunk)> offer) override;
  // From the thread that took: it wrote everything, and the scheduler's thread may offer again.
  void hand_back() override;
  // Whole: the response once every choice has ended, or the error that ended one. Asks
  // `caller_gone` now and then: true cancels the run.
  nlohmann::ordered_json wait(const std::function<bool()>& caller_gone) override;
  // The caller went away: ends every choice (finish_reason "abort").
  void cancel() override;

  // For callers that hold no thread while it runs (the ZeroMQ socket): `done` runs once every
  // choice has ended (at once if they have), on the thread that ended the last one; it may call
  // response() but nothing of the scheduler.
  void when_done(std::function<void()> done) override;
  // The whole response, or the error that ended a choice; only once every choice has ended.
  nlohmann::ordered_json response() const override;

 private:
  friend class CompletionService;
  nlohmann::ordered_json chunk(const Choice& c, std::string text, nlohmann::ordered_json logprobs,
                               std::vector<std::int64_t> token_ids,
                               const nlohmann::ordered_json& versions, bool last) const;
  // A chat stream's first chunks of a choice: the reply's role, then the echoed text if any.
  std::vector<std::string> chat_opening_chunks(const Choice& c) const;
  // A streamed chunk goes to the connection from the scheduler's thread while it is offered,
  // else waits for take(); says whether take() has something to do.
  bool emit(std::string chunk);

  nlohmann::ordered_json usage() const;
  // How a token reads in logprobs: its text, or "token_id:N" (return_tokens_as_token_ids, or no
  // tokenizer).
  std::string token_text(std::int64_t id) const;
  // With echo, the prompt's logprobs (the first token has none) for `c`'s first chunk; JSON null
  // without logprobs. A chat's: its output tokens' from `first_token` on, in chat's shape.
  nlohmann::ordered_json logprobs_of(const Choice& c, bool with_prompt, std::size_t first_token,
                                     std::size_t offset) const;
  // Scheduler callbacks (its lock held; this takes mutex_ after it, never before).
  bool on_token(Choice& c, const model_loader::Sequence& s,
                const std::optional<std::string>& version);
  void on_done(Choice& c, GenerateOutcome outcome);

  protocol::CompletionParams params_;
  std::optional<Chat> chat_;
  std::size_t longest_stop_ = 0;  // of params_.stop: how much streamed text is held back
  std::string model_name_;
  std::string id_;
  std::int64_t created_ = 0;
  GenerationScheduler* scheduler_ = nullptr;
  const model_loader::Tokenizer* tokenizer_ = nullptr;  // none: token ids only
  std::vector<std::unique_ptr<Choice>> choices_;
  std::vector<std::uint64_t> tickets_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> chunks_;
  std::function<bool(const std::string&)> offer_;  // see attach()
  bool offering_ = false;    // the scheduler's thread writes the chunks itself
  bool taker_owed_ = false;  // an offer left bytes behind: take() has work though chunks_ is empty
  std::size_t open_ = 0;     // choices not yet ended
  std::exception_ptr error_;
  bool error_sent_ = false;
  bool usage_sent_ = false;
  std::function<void()> when_done_;
};

class CompletionService {
 public:
  // `tokenizer` may be null (token-id prompts only); it, `scheduler` and `loras` (the adapters a
  // request's `model` may name; null: none) must outlive the service.
  CompletionService(GenerationScheduler& scheduler, const model_loader::Tokenizer* tokenizer,
                    const model_loader::ModelConfig& config, std::string served_model_name,
                    std::chrono::milliseconds timeout, const LoraRegistry* loras = nullptr);

  const std::string& model_name() const { return model_name_; }
  // Checks, tokenizes and queues every choice; throws before anything runs on bad input
  // (ValueError, ModelNotFoundError, RuntimeError, OverloadedError).
  // `caller_gone` cancels the work before the run exists (tokenizing a long prompt).
  std::shared_ptr<CompletionRun> start(protocol::CompletionParams params,
                                       const std::function<bool()>& caller_gone = {});
  // A chat completion: the conversation rendered by `templates` (a request's own template only
  // when `trust_request_template`, as vLLM's --trust-request-chat-template), then as start().
  std::shared_ptr<CompletionRun> start_chat(const protocol::ChatCompletionParams& params,
                                            const ChatTemplates& templates,
                                            bool trust_request_template,
                                            const std::function<bool()>& caller_gone = {});
  // What a request's `model` names: the model served (null, as is an absent or empty name) or a
  // LoRA adapter; vLLM's 404 for anything else.
  std::shared_ptr<const model_loader::LoraAdapter> resolve_model(
      const std::optional<std::string>& model) const;

 private:
  // Checks, tokenizes and queues every choice of `params` (prompts filled in), through `lora`
  // (what resolve_model made of its `model`; null: the model itself).
  std::shared_ptr<CompletionRun> launch(protocol::CompletionParams params,
                                        std::shared_ptr<const model_loader::LoraAdapter> lora,
                                        std::optional<CompletionRun::Chat> chat,
                                        const std::function<bool()>& caller_gone);
  GenerationScheduler& scheduler_;
  const model_loader::Tokenizer* tokenizer_;
  model_loader::ModelConfig config_;
  std::string model_name_;
  std::chrono::milliseconds timeout_;
  const LoraRegistry* loras_;
};

// A run as a route answers it: streamed when it streams, else whole, later.
RouteAnswer answer_of(std::shared_ptr<CompletionRun> run);

// `stream: true` over a front end that cannot send events (ZeroMQ) is a ValueError naming the
// HTTP route that streams (`route`) and what comes back whole instead (`what`).
void refuse_stream_unless_served(bool stream, const RouteCall& call, std::string_view route,
                                 std::string_view what);

// vLLM's limits on a prompt and its completion within the model's context (the messages of its
// generate and completions routes); returns the max_tokens to use (`requested`, or what the
// context leaves when none was asked for).
std::int64_t fit_to_context(std::int64_t max_model_len, std::int64_t prompt_tokens,
                            std::optional<std::int64_t> requested);

}  // namespace hotswap::worker
