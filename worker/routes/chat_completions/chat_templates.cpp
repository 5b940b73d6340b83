#include "worker/routes/chat_completions/chat_templates.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include "model_loader/mapped_file.hpp"
#include "model_loader/tokenizer/byte_level.hpp"
#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"
#include "transport/posix_check.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

// A model file, bounded (a tokenizer_config.json with a large added-token table is a few MB; a
// template past RenderLimits::max_template_bytes is refused when it renders).
std::optional<std::string> read_file(const fs::path& path) {
  constexpr std::size_t kMaxBytes = 64u << 20;
  std::error_code ignored;
  if (!fs::is_regular_file(path, ignored)) return std::nullopt;  // a directory opens, and reads ""
  try {
    return model_loader::read_regular_file(path.string(), kMaxBytes);
  } catch (const transport::PosixError& e) {
    throw protocol::ValueError("cannot read " + path.string() + ": " + e.reason());
  }
}

// vLLM reads a --chat-template that is no file as the template itself, its Python escapes
// decoded (a shell passes "\n" as two characters).
std::string decode_escapes(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[++i];
    const std::size_t hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (hex != 0 && i + hex < s.size() &&
        std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i + 1),
                    s.begin() + static_cast<std::ptrdiff_t>(i + 1 + hex),
                    [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; })) {
      model_loader::utf8_append(
          out, static_cast<char32_t>(std::stoul(std::string(s.substr(i + 1, hex)), nullptr, 16)));
      i += hex;
      continue;
    }
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      default:  // not an escape Python knows: kept as written
        out += '\\';
        out += e;
    }
  }
  return out;
}

// A special token in tokenizer_config.json: its text, or an AddedToken's `content`.
std::optional<std::string> token_text(const ordered_json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

std::string_view strip(std::string_view s) {
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && space(s.back()))
    s.remove_suffix(1);
  return s;
}

// transformers (5.x) copies a message's reasoning under the names templates read it by:
// `thinking` first, `reasoning_content` last (or where the message had them).
constexpr std::array<std::string_view, 3> kReasoningFields{"reasoning_content", "thinking",
                                                           "reasoning"};
ordered_json alias_reasoning(const ordered_json& message) {
  if (!message.is_object()) return message;
  const ordered_json* reasoning = nullptr;
  for (auto field : kReasoningFields) {
    auto it = message.find(std::string(field));
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning == nullptr) return message;
  ordered_json out = ordered_json::object();
  out["thinking"] = *reasoning;
  for (const auto& [key, value] : message.items())
    out[key] = value;
  out["reasoning_content"] = *reasoning;
  return out;
}

// transformers' marker for continue_final_message: appended to the last message's text, found in
// the rendered prompt, and everything from it on cut away.
constexpr std::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

}  // namespace

ChatTemplates ChatTemplates::load(const fs::path& model_dir,
                                  const std::optional<std::string>& override_template) {
  ChatTemplates t;
  std::optional<ordered_json> config;
  if (auto text = read_file(model_dir / "tokenizer_config.json")) {
    if (protocol::scan_json(*text).too_deep) {
      throw protocol::ValueError("the model's tokenizer_config.json nests deeper than " +
                                 std::to_string(protocol::kMaxJsonDepth) + " levels");
    }
    try {
      config = ordered_json::parse(*text);
    } catch (const ordered_json::exception& e) {
      throw protocol::ValueError("the model's tokenizer_config.json is not JSON: " +
                                 std::string(e.what()));
    }
  }
  if (config && config->is_object()) {
    for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                             "cls_token", "mask_token"}) {
      if (auto it = config->find(name); it != config->end()) {
        if (auto text = token_text(*it)) t.special_tokens_[name] = *text;
      }
    }
    if (auto it = config->find("additional_special_tokens");
        it != config->end() && it->is_array()) {
      ordered_json extra = ordered_json::array();
      for (const auto& token : *it) {
        if (auto text = token_text(token)) extra.push_back(*text);
      }
      t.special_tokens_["additional_special_tokens"] = extra;
    }
    if (auto it = config->find("chat_template"); it != config->end()) {
      if (it->is_string()) {
        t.templates_["default"] = it->get<std::string>();
      } else if (it->is_array()) {
        for (const auto& named : *it) {
          if (!named.is_object() || !named.contains("name") || !named["name"].is_string() ||
              !named.contains("template") || !named["template"].is_string()) {
            throw protocol::ValueError(
                "tokenizer_config.json's chat_template list holds an entry that is not "
                "{\"name\": ..., \"template\": ...}: " +
                named.dump());
          }
          t.templates_[named["name"].get<std::string>()] = named["template"].get<std::string>();
        }
      } else if (!it->is_null()) {
        throw protocol::ValueError(
            "tokenizer_config.json's chat_template is neither a template nor a list of named "
            "ones: " +
            it->dump());
      }
    }
  }
  // A chat_template.jinja beside it is the model's default template (transformers saves it so).
  if (auto text = read_file(model_dir / "chat_template.jinja")) t.templates_["default"] = *text;
  if (override_template) {
    if (auto text = read_file(*override_template)) {
      t.templates_["default"] = *text;
    } else if (override_template->find_first_of("{}\n") == std::string::npos) {
      throw protocol::ValueError("The supplied chat template (" + *override_template +
                                 ") looks like a file path, but it failed to be opened.");
    } else {
      t.templates_["default"] = decode_escapes(*override_template);
    }
  }
  return t;
}

const std::string& ChatTemplates::select(const ChatConversation& c) const {
  if (c.chat_template) {
    auto named = templates_.find(*c.chat_template);
    return named != templates_.end() ? named->second : *c.chat_template;
  }
  if (templates_.empty()) {
    throw protocol::ValueError(
        "As of transformers v4.44, default chat template is no longer allowed, so you must "
        "provide a chat template if the tokenizer does not define one.");
  }
  if (!c.tools.is_null()) {
    if (auto tool_use = templates_.find("tool_use"); tool_use != templates_.end())
      return tool_use->second;
  }
  if (auto fallback = templates_.find("default"); fallback != templates_.end())
    return fallback->second;
  std::string names;
  for (const auto& [name, text] : templates_)
    names += (names.empty() ? "'" : ", '") + name + "'";
  throw protocol::ValueError(
      "This model has multiple chat templates with no default specified! Please either pass a "
      "chat template or the name of the template you wish to use to the `chat_template` "
      "argument. Available template names are [" +
      names + "].");
}

namespace {

// The text of a content part vLLM reads as text, or nullopt for one it skips (a null text).
// Parts of other kinds (images, audio) are refused: hotswap's models take text.
std::optional<std::string> part_text(const ordered_json& part, std::size_t m) {
  if (part.is_string()) return part.get<std::string>();
  const std::string where = "messages[" + std::to_string(m) + "]";
  if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
    throw protocol::ValueError("a content part of " + where +
                               " is neither text nor an object with a `type`: " + part.dump());
  }
  const std::string type = part["type"];
  const char* key = type == "text" || type == "input_text" || type == "output_text" ? "text"
                    : type == "refusal"                                             ? "refusal"
                    : type == "thinking"                                            ? "thinking"
                                                                                    : nullptr;
  if (key == nullptr) {
    throw protocol::ValueError("Unsupported chat content part type: '" + type + "' in " + where +
                               ". hotswap's models take text: parts of type text, input_text, "
                               "output_text, refusal or thinking");
  }
  auto text = part.find(key);
  if (text == part.end() || text->is_null()) return std::nullopt;
  if (!text->is_string()) {
    throw protocol::ValueError("the `" + std::string(key) + "` of a content part of " + where +
                               " is not a string: " + text->dump());
  }
  return text->get<std::string>();
}

std::string joined(const std::vector<std::string>& texts) {
  std::string out;
  for (std::size_t i = 0; i < texts.size(); ++i)
    out += (i == 0 ? "" : "\n") + texts[i];
  return out;
}

// One message as vLLM's chat_utils hands it to transformers.
ordered_json conversation_message(const ordered_json& message, std::size_t m, bool parts_as_list) {
  const std::string where = "messages[" + std::to_string(m) + "]";
  if (!message.is_object()) {
    throw protocol::ValueError(where +
                               " is not a message (an object with a `role`): " + message.dump());
  }
  auto role = message.find("role");
  if (role == message.end() || !role->is_string()) {
    throw protocol::ValueError(where + " needs a `role`, a string");
  }
  std::vector<std::string> texts;
  if (auto content = message.find("content"); content != message.end() && !content->is_null()) {
    if (content->is_string()) {
      texts.push_back(content->get<std::string>());
    } else if (content->is_array()) {
      for (const auto& part : *content) {
        if (auto text = part_text(part, m)) texts.push_back(std::move(*text));
      }
    } else {
      throw protocol::ValueError("the `content` of " + where +
                                 " is neither text nor a list of parts: " + content->dump());
    }
  }
  ordered_json out = {{"role", *role}};
  // A tool's reply is text even for a template that takes parts.
  if (parts_as_list && *role != "tool") {
    ordered_json parts = ordered_json::array();
    for (auto& text : texts)
      parts.push_back({{"type", "text"}, {"text", std::move(text)}});
    out["content"] = std::move(parts);
  } else {
    out["content"] = joined(texts);
  }
  if (auto calls = message.find("tool_calls");
      *role == "assistant" && calls != message.end() && calls->is_array() && !calls->empty()) {
    ordered_json parsed = *calls;
    // A call's arguments reach the template as vLLM hands them over: JSON text parsed (text that
    // is not JSON refused), an object or a list as it is, and none at all (null, "", 0, false,
    // {} or []) as {}.
    for (auto& call : parsed) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      auto& function = call["function"];
      auto arguments = function.find("arguments");
      const bool none =
          arguments == function.end() || arguments->is_null() ||
          (arguments->is_string() && arguments->get_ref<const std::string&>().empty()) ||
          (arguments->is_number() && *arguments == 0) || *arguments == false ||
          ((arguments->is_object() || arguments->is_array()) && arguments->empty());
      if (none) {
        function["arguments"] = ordered_json::object();
        continue;
      }
      if (arguments->is_object() || arguments->is_array()) continue;
      const std::string arguments_of = "a tool call's `arguments` in " + where;
      if (!arguments->is_string()) {
        throw protocol::ValueError(arguments_of +
                                   " are neither JSON text nor an object: " + arguments->dump());
      }
      const std::string text = arguments->get<std::string>();
      // Text inside a string escaped the body's depth check: nested too deep, copying or
      // printing it would overflow the stack.
      if (protocol::scan_json(text).too_deep) {
        throw protocol::ValueError(arguments_of + " nest deeper than " +
                                   std::to_string(protocol::kMaxJsonDepth) + " levels");
      }
      try {
        *arguments = ordered_json::parse(text);
      } catch (const ordered_json::exception& e) {  // a syntax error, or a number out of range
        throw protocol::ValueError(arguments_of + " are not JSON: " + e.what());
      }
    }
    out["tool_calls"] = std::move(parsed);
  }
  const ordered_json* reasoning = nullptr;
  for (const char* name : {"reasoning", "reasoning_content"}) {
    if (auto it = message.find(name); it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (*role == "assistant" && reasoning != nullptr) {
    out["reasoning"] = *reasoning;
    out["reasoning_content"] = *reasoning;
  }
  if (auto id = message.find("tool_call_id"); *role == "tool" && id != message.end()) {
    out["tool_call_id"] = *id;
  }
  if (auto name = message.find("name"); name != message.end() && name->is_string()) {
    out["name"] = *name;
  }
  return out;
}

}  // namespace

std::string message_text(const ordered_json& content, std::size_t m) {
  if (content.is_string()) return content.get<std::string>();
  std::vector<std::string> texts;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (auto text = part_text(part, m)) texts.push_back(std::move(*text));
    }
  }
  return joined(texts);
}

void refuse_untrusted_template(const ChatConversation& c, bool trusted) {
  if (c.chat_template && !trusted) {
    throw protocol::ValueError(
        "Chat template is passed with request, but --trust-request-chat-template is not set. "
        "Refused request with untrusted chat template.");
  }
}

std::string ChatTemplates::render(const ChatConversation& c, const RenderLimits& limits) const {
  if (!c.messages.is_array()) throw protocol::ValueError("`messages` must be a list of messages");
  const bool parts_as_list = JinjaRenderer::instance().iterates_over_content(select(c), limits);
  ChatConversation converted = c;
  converted.messages = ordered_json::array();
  for (std::size_t m = 0; m < c.messages.size(); ++m)
    converted.messages.push_back(conversation_message(c.messages[m], m, parts_as_list));
  return apply(converted, limits);
}

std::string ChatTemplates::apply(const ChatConversation& c, const RenderLimits& limits) const {
  const std::string& source = select(c);
  if (!c.messages.is_array()) throw protocol::ValueError("`messages` must be a list of messages");
  ordered_json messages = ordered_json::array();
  for (const auto& m : c.messages)
    messages.push_back(alias_reasoning(m));

  std::string final_text;  // continue_final_message: the text the prompt must end open on
  if (c.continue_final_message) {
    if (messages.empty()) {
      throw protocol::ValueError("continue_final_message is set but the conversation is empty!");
    }
    ordered_json& last = messages.back();
    if (!last.is_object() || !last.contains("content") || last["content"].is_null()) {
      throw protocol::ValueError(
          "continue_final_message is set but the final message has no \"content\" to continue!");
    }
    if (source.find("content") == std::string::npos) {
      throw protocol::ValueError(
          "continue_final_message is set to \"content\" but this is not an accepted field in the "
          "chat_template");
    }
    ordered_json& content = last["content"];
    ordered_json* text = nullptr;
    if (content.is_array()) {
      for (auto part = content.rbegin(); part != content.rend(); ++part) {
        if (part->is_object() && part->contains("text") && (*part)["text"].is_string()) {
          text = &(*part)["text"];
          break;
        }
      }
      if (text == nullptr) {
        throw protocol::ValueError(
            "continue_final_message is set but we could not find any text to continue in the "
            "final message!");
      }
    } else if (content.is_string()) {
      text = &content;
    } else {
      throw protocol::ValueError(
          "continue_final_message is set but the final message's content is neither text nor a "
          "list of parts");
    }
    final_text = text->get<std::string>();
    *text = final_text + std::string(kContinueTag);
  }

  // The variables, in the order transformers passes them: the conversation, tools, documents,
  // add_generation_prompt, then the special tokens and the request's extra variables.
  ordered_json variables = {{"messages", std::move(messages)},
                            {"tools", c.tools},
                            {"documents", c.documents},
                            {"add_generation_prompt", c.add_generation_prompt}};
  for (const auto& [key, value] : special_tokens_.items())
    variables[key] = value;
  if (c.chat_template_kwargs.is_object()) {
    for (const auto& [key, value] : c.chat_template_kwargs.items())
      variables[key] = value;
  }
  std::string rendered = JinjaRenderer::instance().render(source, variables, limits);
  if (!c.continue_final_message) return rendered;

  const std::string_view tag = strip(kContinueTag);
  const std::string_view wanted = strip(final_text);
  const std::size_t at = rendered.rfind(tag);
  if (rendered.find(wanted) == std::string::npos || at == std::string::npos) {
    throw protocol::ValueError(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template! This can happen if the chat template deletes portions of "
        "the final message. Please verify the chat template and final message in your chat to "
        "ensure they are compatible.Final message to continue: " +
        std::string(wanted) + "\nRendered chat:\n" + rendered);
  }
  // Where the template kept the spacing after the text, the cut is at the tag; where it trimmed
  // the text's trailing spacing, the spacing before the tag goes too.
  const bool kept = std::string_view(rendered).substr(at, kContinueTag.size()) == kContinueTag;
  rendered.resize(at);
  while (!kept && !rendered.empty() && std::isspace(static_cast<unsigned char>(rendered.back())))
    rendered.pop_back();
  return rendered;
}

}  // namespace hotswap::worker
