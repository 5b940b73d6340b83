#include "worker/routes/completions/completion_service.hpp"

#include <algorithm>

#include "model_loader/tokenizer/incremental_detokenizer.hpp"
#include "protocol/errors.hpp"
#include "worker/log_line.hpp"
#include "worker/routes/openai_response.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Python's len() of a string: code points, which text_offset counts in.
std::size_t code_points(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// The largest position <= `at` that starts a UTF-8 character of `text`.
std::size_t char_boundary(const std::string& text, std::size_t at) {
  while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80)
    --at;
  return at;
}

// vLLM floors logprobs here, so that -inf is never written to JSON.
double floored(double logprob) {
  return std::max(logprob, -9999.0);
}

// vLLM 0.34's `weight_versions` of a choice: `[{"version", "start", "end"}, ...]`, half-open
// ranges over its output tokens; null unless the request asked for them. A request through a
// LoRA adapter has hotswap's `lora_version` in each span too: the adapter's version.
ordered_json spans_json(const std::vector<VersionSpan>& spans, bool asked) {
  if (!asked) return nullptr;
  auto text = [](const std::optional<std::string>& v) {
    return v ? ordered_json(*v) : ordered_json(nullptr);
  };
  ordered_json out = ordered_json::array();
  for (const auto& s : spans) {
    ordered_json span = {{"version", text(s.version)}, {"start", s.start}, {"end", s.end}};
    if (s.lora) span["lora_version"] = text(s.lora_version);
    out.push_back(std::move(span));
  }
  return out;
}

}  // namespace

struct CompletionRun::Choice {
  std::size_t index = 0;
  std::size_t prompt_index = 0;
  std::vector<std::int64_t> prompt_ids;
  std::string echo_text;  // the prompt's text, when echoed
  std::optional<model_loader::IncrementalDetokenizer> detokenizer;
  std::string text;            // generated text, cut at a stop string
  std::size_t sent_text = 0;   // bytes of `text` streamed
  std::size_t sent_chars = 0;  // code points streamed, echo included (text_offset)
  bool first_sent = false;
  std::vector<std::int64_t> tokens;
  std::vector<double> logprobs;
  std::vector<std::vector<model_loader::TokenLogprob>> top;
  std::vector<model_loader::SampledToken> prompt_logprobs;
  std::vector<VersionSpan> spans;
  std::optional<std::string> finish_reason;
  json stop_reason = nullptr;
};

namespace {

// One logprob position: the token, its logprob and its alternatives (none for the first prompt
// token, which nothing predicts).
struct Position {
  std::int64_t token;
  std::optional<double> logprob;
  const std::vector<model_loader::TokenLogprob>* top;
};

}  // namespace

CompletionRun::CompletionRun(protocol::CompletionParams params, std::string model_name,
                             std::optional<Chat> chat)
    : params_(std::move(params)),
      chat_(std::move(chat)),
      model_name_(std::move(model_name)),
      id_((chat_ ? "chatcmpl-" : "cmpl-") + params_.request_id.value_or(random_hex(32))),
      created_(unix_seconds()) {
  for (const auto& stop : params_.stop)
    longest_stop_ = std::max(longest_stop_, stop.size());
}

CompletionRun::~CompletionRun() = default;

// vLLM's CompletionLogProbs over `positions`, text offsets counted from `offset`.
static ordered_json logprobs_json(const std::vector<Position>& positions, std::size_t offset,
                                  std::int64_t alternatives,
                                  const std::function<std::string(std::int64_t)>& token_text) {
  ordered_json text_offset = ordered_json::array(), token_logprobs = ordered_json::array(),
               tokens = ordered_json::array(), top_logprobs = ordered_json::array();
  for (const auto& p : positions) {
    const std::string token = token_text(p.token);
    tokens.push_back(token);
    text_offset.push_back(offset);
    offset += code_points(token);
    if (!p.logprob) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(floored(*p.logprob));
    // The sampled token, then the likeliest: at most alternatives + 1 entries.
    ordered_json top = ordered_json::object();
    top[token] = floored(*p.logprob);
    for (std::size_t i = 0; i < p.top->size() && static_cast<std::int64_t>(i) < alternatives; ++i) {
      top[token_text((*p.top)[i].token)] = floored((*p.top)[i].logprob);
    }
    top_logprobs.push_back(std::move(top));
  }
  return {{"text_offset", text_offset},
          {"token_logprobs", token_logprobs},
          {"tokens", tokens},
          {"top_logprobs", top_logprobs}};
}

// A token's text as UTF-8 byte values: chat logprobs' `bytes`.
static ordered_json utf8_bytes(const std::string& text) {
  ordered_json out = ordered_json::array();
  for (unsigned char byte : text)
    out.push_back(byte);
  return out;
}

// vLLM's ChatCompletionLogProbs over `positions`: each token as shown (`shown`), its logprob, the
// bytes of its text (`text`), and its first `alternatives` entries of the sampled token followed
// by the likeliest ones, each once, their bytes those of the token as shown.
static ordered_json chat_logprobs_json(const std::vector<Position>& positions,
                                       std::int64_t alternatives,
                                       const std::function<std::string(std::int64_t)>& shown,
                                       const std::function<std::string(std::int64_t)>& text) {
  ordered_json content = ordered_json::array();
  for (const auto& p : positions) {
    ordered_json top = ordered_json::array();
    std::vector<std::int64_t> listed;
    auto add = [&](std::int64_t token, double logprob) {
      if (static_cast<std::int64_t>(top.size()) >= alternatives ||
          std::find(listed.begin(), listed.end(), token) != listed.end()) {
        return;
      }
      listed.push_back(token);
      const std::string name = shown(token);
      top.push_back({{"token", name}, {"logprob", floored(logprob)}, {"bytes", utf8_bytes(name)}});
    };
    add(p.token, *p.logprob);
    for (const auto& alternative : *p.top)
      add(alternative.token, alternative.logprob);
    content.push_back({{"token", shown(p.token)},
                       {"logprob", floored(*p.logprob)},
                       {"bytes", utf8_bytes(text(p.token))},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

ordered_json CompletionRun::usage() const {
  std::int64_t prompt = 0, completion = 0;
  std::size_t last_prompt = SIZE_MAX;
  for (const auto& c : choices_) {
    if (c->prompt_index != last_prompt) prompt += static_cast<std::int64_t>(c->prompt_ids.size());
    last_prompt = c->prompt_index;
    completion += static_cast<std::int64_t>(c->tokens.size());
  }
  return {{"prompt_tokens", prompt},
          {"total_tokens", prompt + completion},
          {"completion_tokens", completion},
          {"prompt_tokens_details", nullptr}};
}

ordered_json CompletionRun::chunk(const Choice& c, std::string text, ordered_json logprobs,
                                  std::vector<std::int64_t> token_ids, const ordered_json& versions,
                                  bool last) const {
  const bool ids = params_.return_token_ids;
  const bool continuous = params_.include_usage && params_.continuous_usage_stats;
  const auto prompt = static_cast<std::int64_t>(c.prompt_ids.size());
  const auto completion = static_cast<std::int64_t>(c.tokens.size());
  if (chat_) {
    // vLLM writes chat chunks with only the fields it set: the finish, the stop reason and the
    // weight versions on a choice's last chunk only.
    ordered_json choice = {{"index", c.index},
                           {"delta", {{"content", std::move(text)}}},
                           {"logprobs", std::move(logprobs)},
                           {"finish_reason", last ? json(*c.finish_reason) : json(nullptr)}};
    if (last) choice["stop_reason"] = c.stop_reason;
    choice["token_ids"] = ids ? json(token_ids) : json(nullptr);
    if (last && params_.return_weight_versions) choice["weight_versions"] = versions;
    ordered_json out = {{"id", id_},
                        {"object", "chat.completion.chunk"},
                        {"created", created_},
                        {"model", model_name_},
                        {"choices", ordered_json::array({std::move(choice)})}};
    if (continuous) {
      out["usage"] = {{"prompt_tokens", prompt},
                      {"total_tokens", prompt + completion},
                      {"completion_tokens", completion}};
    }
    return out;
  }
  ordered_json choice = {{"index", c.index},
                         {"text", std::move(text)},
                         {"logprobs", std::move(logprobs)},
                         {"finish_reason", last ? json(*c.finish_reason) : json(nullptr)},
                         {"stop_reason", last ? c.stop_reason : json(nullptr)}};
  choice["prompt_token_ids"] = ids && !c.first_sent ? json(c.prompt_ids) : json(nullptr);
  choice["token_ids"] = ids ? json(token_ids) : json(nullptr);
  choice["weight_versions"] = versions;
  ordered_json out = {{"id", id_},
                      {"object", "text_completion"},
                      {"created", created_},
                      {"model", model_name_},
                      {"choices", ordered_json::array({choice})}};
  if (continuous) {
    out["usage"] = {{"prompt_tokens", prompt},
                    {"total_tokens", prompt + completion},
                    {"completion_tokens", completion}};
  } else {
    out["usage"] = nullptr;
  }
  return out;
}

std::vector<std::string> CompletionRun::chat_opening_chunks(const Choice& c) const {
  auto dump = [](const ordered_json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  auto opening = [&](ordered_json delta) {
    return ordered_json{{"id", id_},
                        {"object", "chat.completion.chunk"},
                        {"created", created_},
                        {"model", model_name_},
                        {"choices", ordered_json::array({{{"index", c.index},
                                                          {"delta", std::move(delta)},
                                                          {"logprobs", nullptr},
                                                          {"finish_reason", nullptr}}})}};
  };
  ordered_json role = opening({{"role", chat_->role}, {"content", ""}});
  role["prompt_token_ids"] = params_.return_token_ids ? json(c.prompt_ids) : json(nullptr);
  if (params_.include_usage && params_.continuous_usage_stats) {
    const auto prompt = static_cast<std::int64_t>(c.prompt_ids.size());
    role["usage"] = {{"prompt_tokens", prompt}, {"completion_tokens", 0}, {"total_tokens", prompt}};
  }
  std::vector<std::string> out{dump(role)};
  if (!chat_->echo.empty()) out.push_back(dump(opening({{"content", chat_->echo}})));
  return out;
}

bool CompletionRun::emit(std::string text) {
  if (offering_ && chunks_.empty()) {
    if (offer_(text)) return false;  // on its way: nobody to wake
    // A slow client (the rest waits in the connection) or a gone one: take() takes over.
    offering_ = false;
    taker_owed_ = true;
    return true;
  }
  chunks_.push_back(std::move(text));
  return true;
}

bool CompletionRun::on_token(
    Choice& c, const model_loader::Sequence& s,
    const std::optional<std::string>& /*version: spans come whole at the end*/) {
  std::lock_guard lock(mutex_);
  if (c.prompt_logprobs.empty()) c.prompt_logprobs = s.prompt_logprobs();
  if (params_.max_tokens == 0) return true;  // echo only: the one token generated is dropped
  const std::int64_t id = s.output_tokens().back();
  c.tokens.push_back(id);
  c.logprobs.push_back(s.output_logprobs().back());
  c.top.push_back(s.output_top_logprobs().back());

  const bool stopped_by_token = s.stop_token().has_value();
  if (stopped_by_token) {
    const auto& user = params_.stop_token_ids;
    // A stop token the request named is its stop_reason; the model's EOS is none.
    c.stop_reason =
        std::find(user.begin(), user.end(), id) != user.end() ? json(id) : json(nullptr);
  }
  bool stop_hit = false;
  // A stop token's own text stays out unless asked for, as vLLM's detokenizer leaves it.
  if (c.detokenizer && !(stopped_by_token && !params_.include_stop_str_in_output)) {
    const std::size_t before = c.text.size();
    c.text += c.detokenizer->push(id);
    std::size_t best = std::string::npos;
    const std::string* matched = nullptr;
    for (const auto& stop : params_.stop) {
      const std::size_t from = before + 1 > stop.size() ? before + 1 - stop.size() : 0;
      const std::size_t at = c.text.find(stop, from);
      if (at != std::string::npos && at < best) {
        best = at;
        matched = &stop;
      }
    }
    if (matched != nullptr) {
      c.text.resize(best + (params_.include_stop_str_in_output ? matched->size() : 0));
      c.stop_reason = *matched;
      stop_hit = true;
    }
  }
  if (!params_.stream) return !stop_hit;

  // Text that may still turn out to start a stop string is held back until it cannot.
  std::size_t limit = c.text.size();
  if (!stop_hit && !s.finished() && longest_stop_ > 1) {
    limit = c.text.size() > longest_stop_ - 1 ? c.text.size() - (longest_stop_ - 1) : 0;
    limit = char_boundary(c.text, std::max(limit, c.sent_text));
  }
  std::string delta = c.first_sent ? "" : c.echo_text;
  delta += c.text.substr(c.sent_text, limit - c.sent_text);
  c.sent_text = limit;
  ordered_json logprobs = logprobs_of(c, !c.first_sent, c.tokens.size() - 1, c.sent_chars);
  c.sent_chars += code_points(delta);
  std::vector<std::string> out;
  if (chat_ && !c.first_sent) out = chat_opening_chunks(c);
  // Only a choice's last chunk carries its spans, over the whole output (vLLM 0.34).
  out.push_back(chunk(c, std::move(delta), std::move(logprobs), {id}, nullptr, false)
                    .dump(-1, ' ', false, json::error_handler_t::replace));
  c.first_sent = true;
  bool wake = false;
  for (auto& text : out)
    wake = emit(std::move(text)) || wake;
  if (wake) changed_.notify_all();
  return !stop_hit;
}

void CompletionRun::on_done(Choice& c, GenerateOutcome outcome) {
  std::unique_lock lock(mutex_);
  --open_;
  if (outcome.error) {
    if (!error_) error_ = outcome.error;
    if (params_.stream && !error_sent_) {
      try {
        std::rethrow_exception(outcome.error);
      } catch (const std::exception& e) {
        chunks_.push_back(
            openai_error(e).body.dump(-1, ' ', false, json::error_handler_t::replace));
      }
      error_sent_ = true;
    }
  } else {
    c.finish_reason = outcome.result->finish_reason;
    c.spans = outcome.result->weight_versions;
    if (params_.max_tokens == 0) c.spans.clear();
    if (params_.stream) {
      if (chat_ && !c.first_sent) {
        for (auto& opening : chat_opening_chunks(c))
          chunks_.push_back(std::move(opening));
      }
      std::string rest = c.first_sent ? "" : c.echo_text;
      rest += c.text.substr(std::min(c.sent_text, c.text.size()));
      c.sent_text = c.text.size();
      ordered_json logprobs =
          c.first_sent ? ordered_json(nullptr) : logprobs_of(c, true, c.tokens.size(), 0);
      chunks_.push_back(chunk(c, std::move(rest), std::move(logprobs), {},
                              spans_json(c.spans, params_.return_weight_versions), true)
                            .dump(-1, ' ', false, json::error_handler_t::replace));
      c.first_sent = true;
    }
  }
  if (open_ == 0 && params_.stream && params_.include_usage && !usage_sent_) {
    ordered_json last = {{"id", id_},
                         {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                         {"created", created_},
                         {"model", model_name_},
                         {"choices", ordered_json::array()}};
    auto u = usage();
    u.erase("prompt_tokens_details");
    last["usage"] = u;
    chunks_.push_back(last.dump(-1, ' ', false, json::error_handler_t::replace));
    usage_sent_ = true;
  }
  changed_.notify_all();
  if (open_ == 0 && when_done_) {
    auto done = std::move(when_done_);
    lock.unlock();
    done();
  }
}

void CompletionRun::when_done(std::function<void()> done) {
  std::unique_lock lock(mutex_);
  if (open_ != 0) {
    when_done_ = std::move(done);
    return;
  }
  lock.unlock();
  done();
}

ordered_json CompletionRun::logprobs_of(const Choice& c, bool with_prompt, std::size_t first_token,
                                        std::size_t offset) const {
  if (chat_) {
    if (!chat_->logprobs) return nullptr;
    std::vector<Position> positions;
    for (std::size_t i = first_token; i < c.tokens.size(); ++i)
      positions.push_back({c.tokens[i], c.logprobs[i], &c.top[i]});
    return chat_logprobs_json(
        positions, chat_->top_logprobs, [this](std::int64_t t) { return token_text(t); },
        [this](std::int64_t t) {
          return tokenizer_ != nullptr ? tokenizer_->decode({t}) : "token_id:" + std::to_string(t);
        });
  }
  if (!params_.logprobs) return nullptr;
  std::vector<Position> positions;
  if (with_prompt && params_.echo) {
    positions.push_back({c.prompt_ids.front(), std::nullopt, nullptr});
    for (const auto& p : c.prompt_logprobs)
      positions.push_back({p.token, p.logprob, &p.top});
  }
  for (std::size_t i = first_token; i < c.tokens.size(); ++i)
    positions.push_back({c.tokens[i], c.logprobs[i], &c.top[i]});
  return logprobs_json(positions, offset, *params_.logprobs,
                       [this](std::int64_t t) { return token_text(t); });
}

std::string CompletionRun::token_text(std::int64_t id) const {
  if (params_.return_tokens_as_token_ids || tokenizer_ == nullptr) {
    return "token_id:" + std::to_string(id);
  }
  return tokenizer_->decode({id});
}

std::vector<std::string> CompletionRun::take(std::chrono::milliseconds wait, bool& finished) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, wait, [&] { return !chunks_.empty() || open_ == 0 || taker_owed_; });
  std::vector<std::string> out(std::make_move_iterator(chunks_.begin()),
                               std::make_move_iterator(chunks_.end()));
  chunks_.clear();
  finished = open_ == 0;
  offering_ = false;  // the caller writes now
  taker_owed_ = false;
  return out;
}

void CompletionRun::attach(std::function<bool(const std::string& chunk)> offer) {
  std::lock_guard lock(mutex_);
  offer_ = std::move(offer);
  offering_ = false;
}

void CompletionRun::hand_back() {
  std::lock_guard lock(mutex_);
  offering_ = offer_ && chunks_.empty() && open_ != 0 && !taker_owed_;
}

ordered_json CompletionRun::wait(const std::function<bool()>& caller_gone) {
  {
    std::unique_lock lock(mutex_);
    while (!changed_.wait_for(lock, std::chrono::milliseconds(100), [&] { return open_ == 0; })) {
      if (caller_gone && caller_gone()) {
        lock.unlock();
        cancel();
        lock.lock();
      }
    }
  }
  return response();
}

ordered_json CompletionRun::response() const {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  ordered_json choices = ordered_json::array();
  const bool ids = params_.return_token_ids;
  for (const auto& c : choices_) {
    ordered_json choice = {{"index", c->index}};
    if (chat_) {
      choice["message"] = {{"role", chat_->role}, {"content", chat_->echo + c->text},
                           {"refusal", nullptr},  {"annotations", nullptr},
                           {"audio", nullptr},    {"function_call", nullptr},
                           {"reasoning", nullptr}};
      choice["logprobs"] = logprobs_of(*c, false, 0, 0);
    } else {
      choice["text"] = c->echo_text + c->text;
      choice["logprobs"] = logprobs_of(*c, true, 0, 0);
    }
    choice["finish_reason"] = c->finish_reason.value_or("abort");
    choice["stop_reason"] = c->stop_reason;
    choice["token_ids"] = ids ? json(c->tokens) : json(nullptr);
    if (!chat_) {  // a chat's prompt is the response's, once
      choice["prompt_logprobs"] = nullptr;
      choice["prompt_token_ids"] = ids ? json(c->prompt_ids) : json(nullptr);
    }
    choice["weight_versions"] = spans_json(c->spans, params_.return_weight_versions);
    choices.push_back(std::move(choice));
  }
  ordered_json out = {{"id", id_},
                      {"object", chat_ ? "chat.completion" : "text_completion"},
                      {"created", created_},
                      {"model", model_name_},
                      {"choices", choices},
                      {"service_tier", nullptr},
                      {"system_fingerprint", nullptr},
                      {"usage", usage()}};
  if (chat_) {
    out["prompt_logprobs"] = nullptr;
    out["prompt_token_ids"] =
        ids && !choices_.empty() ? json(choices_.front()->prompt_ids) : json(nullptr);
  }
  out["kv_transfer_params"] = nullptr;
  return out;
}

void CompletionRun::cancel() {
  // Not under mutex_: the scheduler calls back into on_done with its own lock held.
  for (auto ticket : tickets_)
    scheduler_->cancel(ticket);
}

CompletionService::CompletionService(GenerationScheduler& scheduler,
                                     const model_loader::Tokenizer* tokenizer,
                                     const model_loader::ModelConfig& config,
                                     std::string served_model_name,
                                     std::chrono::milliseconds timeout, const LoraRegistry* loras)
    : scheduler_(scheduler),
      tokenizer_(tokenizer),
      config_(config),
      model_name_(std::move(served_model_name)),
      timeout_(timeout),
      loras_(loras) {}

std::shared_ptr<const model_loader::LoraAdapter> CompletionService::resolve_model(
    const std::optional<std::string>& model) const {
  if (!model || model->empty() || *model == model_name_) return nullptr;
  if (loras_ != nullptr) {
    if (auto served = loras_->find(*model)) return served->adapter;
  }
  throw protocol::ModelNotFoundError("The model `" + *model + "` does not exist.");
}

std::int64_t fit_to_context(std::int64_t max_len, std::int64_t input,
                            std::optional<std::int64_t> requested) {
  if (input > max_len) {
    throw protocol::ValueError("This model's maximum context length is " + std::to_string(max_len) +
                               " tokens. However, your request has " + std::to_string(input) +
                               " input tokens. Please reduce the length of the input messages.");
  }
  const std::int64_t left = max_len - input;
  const std::int64_t max_tokens = requested.value_or(left);
  if (max_tokens > left || max_tokens < 1) {
    throw protocol::ValueError(
        "'max_tokens' or 'max_completion_tokens' is too large: " + std::to_string(max_tokens) +
        ". This model's maximum context length is " + std::to_string(max_len) +
        " tokens and your request has " + std::to_string(input) + " input tokens (" +
        std::to_string(max_tokens) + " > " + std::to_string(max_len) + " - " +
        std::to_string(input) + ").");
  }
  return max_tokens;
}

namespace {

// vLLM's warning for the fields it accepts and does nothing with.
void warn_ignored(const protocol::CompletionParams& p) {
  if (p.ignored_fields.empty()) return;
  std::string names;
  for (const auto& f : p.ignored_fields)
    names += (names.empty() ? "'" : ", '") + f + "'";
  LogLine{} << "hotswap-worker: warning: The following fields were present in the request but "
               "ignored: {"
            << names << "}\n";
}

}  // namespace

std::shared_ptr<CompletionRun> CompletionService::start(protocol::CompletionParams p,
                                                        const std::function<bool()>& caller_gone) {
  warn_ignored(p);
  auto lora = resolve_model(p.model);
  return launch(std::move(p), std::move(lora), std::nullopt, caller_gone);
}

std::shared_ptr<CompletionRun> CompletionService::start_chat(
    const protocol::ChatCompletionParams& params, const ChatTemplates& templates,
    bool trust_request_template, const std::function<bool()>& caller_gone) {
  warn_ignored(params.completion);
  const auto& conversation = params.conversation;
  auto lora = resolve_model(params.completion.model);  // a 404 before the template renders
  if (tokenizer_ == nullptr) {
    throw protocol::ValueError(
        "chat completions need the model's tokenizer, and this worker has none (no "
        "tokenizer.json, or --skip-tokenizer-init): use /v1/completions with token ids");
  }
  refuse_untrusted_template(conversation, trust_request_template);
  protocol::CompletionParams p = params.completion;
  p.prompts = {protocol::CompletionPrompt{templates.render(conversation), {}}};
  CompletionRun::Chat chat;
  chat.logprobs = params.logprobs;
  chat.top_logprobs = params.top_logprobs;
  // The reply's role: the assistant's, or, continuing a message, that message's.
  const auto& messages = conversation.messages;
  if (!conversation.add_generation_prompt && !messages.empty() && messages.back().is_object() &&
      messages.back().contains("role") && messages.back()["role"].is_string()) {
    chat.role = messages.back()["role"].get<std::string>();
  }
  if (params.echo && !messages.empty() && messages.back().is_object() &&
      messages.back().value("role", nlohmann::ordered_json()) == chat.role &&
      messages.back().contains("content") && !messages.back()["content"].is_null()) {
    chat.echo = message_text(messages.back()["content"], messages.size() - 1);
  }
  return launch(std::move(p), std::move(lora), std::move(chat), caller_gone);
}

std::shared_ptr<CompletionRun> CompletionService::launch(
    protocol::CompletionParams p, std::shared_ptr<const model_loader::LoraAdapter> lora,
    std::optional<CompletionRun::Chat> chat, const std::function<bool()>& caller_gone) {
  if (tokenizer_ == nullptr) {
    const bool text = std::any_of(p.prompts.begin(), p.prompts.end(),
                                  [](const auto& prompt) { return prompt.text.has_value(); });
    if (text || !p.stop.empty()) {
      throw protocol::ValueError(
          std::string(text ? "a text prompt" : "stop strings") +
          " need the model's tokenizer, and this worker has none (no tokenizer.json, or "
          "--skip-tokenizer-init): send the prompt as token ids");
    }
  }
  // Answered under the name asked for: an adapter's, or the model's.
  const std::string answered_as = lora != nullptr ? *p.model : model_name_;
  auto run = std::make_shared<CompletionRun>(std::move(p), answered_as, std::move(chat));
  const auto& q = run->params_;
  run->scheduler_ = &scheduler_;
  run->tokenizer_ = tokenizer_;

  // More sequences than can ever wait at once is no overload that a retry outlives: a 400
  // naming the limit, as vLLM refuses what it can never schedule.
  const std::size_t sequences = q.prompts.size() * static_cast<std::size_t>(q.n);
  if (sequences > scheduler_.max_waiting()) {
    throw protocol::ValueError("the request asks for " + std::to_string(sequences) +
                               " sequences (" + std::to_string(q.prompts.size()) +
                               " prompts, n = " + std::to_string(q.n) + "), more than the " +
                               std::to_string(scheduler_.max_waiting()) +
                               " this worker can queue at once (--max-queued-requests)");
  }
  std::vector<GenerateRequest> requests;
  for (std::size_t pi = 0; pi < q.prompts.size(); ++pi) {
    const auto& prompt = q.prompts[pi];
    // A text that cannot fit is tokenized only until that is certain.
    const auto max_len = static_cast<std::size_t>(config_.max_position_embeddings);
    std::optional<std::vector<std::int64_t>> within =
        prompt.text
            ? tokenizer_->encode_within(*prompt.text, q.add_special_tokens, max_len, caller_gone)
            : prompt.token_ids;
    if (!within) {
      throw protocol::ValueError("This model's maximum context length is " +
                                 std::to_string(max_len) +
                                 " tokens. However, your request has more than that many input "
                                 "tokens. Please reduce the length of the input messages.");
    }
    std::vector<std::int64_t> ids = std::move(*within);
    if (ids.empty()) throw protocol::ValueError("The decoder prompt cannot be empty");
    // Echo only (max_tokens 0) runs one step, whose token is dropped, as vLLM does.
    const std::int64_t max_tokens =
        fit_to_context(config_.max_position_embeddings, static_cast<std::int64_t>(ids.size()),
                       q.max_tokens == 0 ? std::optional<std::int64_t>(1) : q.max_tokens);
    for (std::int64_t i = 0; i < q.n; ++i) {
      auto choice = std::make_unique<CompletionRun::Choice>();
      choice->index = pi * static_cast<std::size_t>(q.n) + static_cast<std::size_t>(i);
      choice->prompt_index = pi;
      choice->prompt_ids = ids;
      if (q.echo) {
        choice->echo_text = prompt.text             ? *prompt.text
                            : tokenizer_ != nullptr ? tokenizer_->decode(ids, q.skip_special_tokens)
                                                    : "";
      }
      if (tokenizer_ != nullptr)
        choice->detokenizer.emplace(*tokenizer_, ids, q.skip_special_tokens);
      GenerateRequest request;
      request.prompt_token_ids = ids;
      // vLLM's external id of prompt i, which abort_requests names: "cmpl-<id>-<i>".
      request.request_id = run->id_ + "-" + std::to_string(pi);
      request.lora = lora;
      if (lora != nullptr) request.lora_name = *q.model;
      auto& sp = request.params;
      static_cast<protocol::SamplingFields&>(sp) = q;  // as read and validated
      sp.max_tokens = max_tokens;
      // n samples of one seeded request differ from each other and repeat run to run.
      if (q.seed) sp.seed = *q.seed + static_cast<std::uint64_t>(i);
      sp.stop_token_ids = q.stop_token_ids;
      if (!q.ignore_eos) {
        sp.stop_token_ids.insert(sp.stop_token_ids.end(), config_.eos_token_ids.begin(),
                                 config_.eos_token_ids.end());
      }
      sp.logprobs = q.logprobs.value_or(0);
      sp.prompt_logprobs = q.echo && q.logprobs.has_value();
      request.logprobs = true;
      CompletionRun::Choice* c = choice.get();
      request.on_token = [run, c](const model_loader::Sequence& s,
                                  const std::optional<std::string>& version) {
        return run->on_token(*c, s, version);
      };
      run->choices_.push_back(std::move(choice));
      requests.push_back(std::move(request));
    }
  }
  run->open_ = requests.size();
  const auto deadline = Clock::now() + timeout_;
  try {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      CompletionRun::Choice* c = run->choices_[i].get();
      run->tickets_.push_back(scheduler_.submit(
          std::move(requests[i]), deadline,
          [run, c](GenerateOutcome outcome) { run->on_done(*c, std::move(outcome)); }));
    }
  } catch (...) {
    run->cancel();  // the choices already queued go; the request is refused whole
    throw;
  }
  return run;
}

RouteAnswer answer_of(std::shared_ptr<CompletionRun> run) {
  if (run->streaming()) return RouteAnswer::streamed(std::move(run));
  return RouteAnswer::later(std::move(run));
}

void refuse_stream_unless_served(bool stream, const RouteCall& call, std::string_view route,
                                 std::string_view what) {
  if (!stream || call.may_stream) return;
  throw protocol::ValueError("`stream: true` is served on the HTTP route " + std::string(route) +
                             " (server-sent events); over ZeroMQ " + std::string(what) +
                             " comes back whole");
}

}  // namespace hotswap::worker
