// ChatTemplates: a model's chat templates and the prompt a conversation renders to, as vLLM's
// chat route asks transformers' apply_chat_template for it.
//
// Where the templates come from, as transformers and vLLM read them: `--chat-template` (a file,
// or the template itself); else the model directory's `chat_template.jinja`; else
// tokenizer_config.json's `chat_template`, a string or a list of named templates. A request may
// bring its own (`chat_template`). With named templates, one named by the request's
// `chat_template` is taken, else `tool_use` when tools are given and there is one, else `default`.
// The template sees the conversation, `tools`, `documents`, `add_generation_prompt`, the
// tokenizer's special tokens (bos_token, eos_token, ...) and the request's
// `chat_template_kwargs`; `continue_final_message` leaves the last message open, as transformers
// cuts it. Messages reach the template as vLLM hands them to transformers (render()).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/method_params.hpp"
#include "worker/serving/jinja_renderer.hpp"

namespace hotswap::worker {

using protocol::ChatConversation;

class ChatTemplates {
 public:
  // Reads the model directory's templates and special tokens; `override_template` is
  // --chat-template (a path to a file, or the template itself). A path-like value that is not a
  // file is an error (vLLM's).
  static ChatTemplates load(const std::filesystem::path& model_dir,
                            const std::optional<std::string>& override_template = std::nullopt);

  // Whether the model has any template (a request can still bring its own).
  bool any() const { return !templates_.empty(); }
  // The template a conversation renders with; ValueError with vLLM's message when there is none.
  const std::string& select(const ChatConversation& conversation) const;
  // The prompt text of a request's conversation, as vLLM renders it: each message converted as
  // its chat_utils converts it (content text, or a list of text parts for a template that loops
  // over them; tool calls' JSON arguments parsed; reasoning under `reasoning` and
  // `reasoning_content`), then apply(). ValueError for a message that is not one (no role, a
  // part that is not text), and as apply().
  std::string render(const ChatConversation& conversation, const RenderLimits& limits = {}) const;
  // transformers' apply_chat_template on the messages as they are: ValueError for a
  // conversation the template refuses (raise_exception), a template error, or a
  // continue_final_message transformers cannot cut.
  std::string apply(const ChatConversation& conversation, const RenderLimits& limits = {}) const;

  // The variables the template sees besides the conversation's: bos_token, eos_token, ...
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  std::map<std::string, std::string> templates_;  // by name; "default" for a single one
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

// The text of messages[m]'s `content` as the template's text format has it: itself, or its text
// parts a line each (ValueError for a part that is not text).
std::string message_text(const nlohmann::ordered_json& content, std::size_t m);

// vLLM's refusal of a request that brings its own `chat_template` to a server not started with
// --trust-request-chat-template (`trusted`).
void refuse_untrusted_template(const ChatConversation& c, bool trusted);

}  // namespace hotswap::worker
