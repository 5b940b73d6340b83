// A model's chat templates, found where transformers and vLLM find them, and conversations
// rendered to what transformers renders (golden vectors: continue_final_message, reasoning
// fields; tests/golden/make_chat_template_golden.py).
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model_loader/tokenizer/tokenizer.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "worker/routes/chat_completions/chat_templates.hpp"

using namespace hotswap;
using json = nlohmann::ordered_json;
using testing::TempDir;
using worker::ChatConversation;
using worker::ChatTemplates;

namespace {

void write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

ChatTemplates with_config(const TempDir& dir, const json& tokenizer_config) {
  write(dir.path / "tokenizer_config.json", tokenizer_config.dump());
  return ChatTemplates::load(dir.path);
}

ChatConversation conversation(json messages) {
  ChatConversation c;
  c.messages = std::move(messages);
  return c;
}

// The ValueError's message of render() (apply(), with `as_given`), or "" where it renders.
// tests/golden/chat_template/golden.json (tests/golden/make_chat_template_golden.py).
json golden_vectors() {
  std::ifstream in(std::string(HOTSWAP_GOLDEN_DIR) + "/chat_template/golden.json");
  BOOST_REQUIRE(in.good());
  return json::parse(in);
}

std::string error_of(const ChatTemplates& templates, const ChatConversation& c,
                     bool as_given = false) {
  try {
    as_given ? templates.apply(c) : templates.render(c);
  } catch (const protocol::ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(chat_templates)

BOOST_AUTO_TEST_CASE(conversations_render_as_transformers_renders_them) {
  const json golden = golden_vectors();
  int cases = 0;
  for (const auto& c : golden["conversations"]) {
    TempDir dir;
    const auto templates = with_config(dir, {{"chat_template", c["template"]}});
    ChatConversation conversation;
    conversation.messages = c["messages"];
    conversation.add_generation_prompt = c["add_generation_prompt"];
    conversation.continue_final_message = c["continue_final_message"];
    const std::string name = c["name"];
    if (c.contains("rendered")) {
      BOOST_TEST(templates.apply(conversation) == c["rendered"].get<std::string>(), name);
    } else {
      BOOST_TEST(error_of(templates, conversation, true) == c["error"].get<std::string>(), name);
    }
    ++cases;
  }
  BOOST_TEST(cases == 6);
}

// Templates in the styles real ones use (system hoisting, macros, loop.first and loop.last,
// raise_exception on a bad role order, namespaces, tools and tool calls through tojson,
// enable_thinking, reasoning in history, non-ASCII text), each rendered the chat route's way and
// tokenized by one of the project's test tokenizers: the text and the ids transformers'
// apply_chat_template gives.
BOOST_AUTO_TEST_CASE(real_template_styles_give_transformers_text_and_ids) {
  const json golden = golden_vectors();
  int cases = 0;
  for (const auto& c : golden["applied"]) {
    const std::string name = c["name"];
    TempDir dir;
    json config = c["special"];
    config["chat_template"] = c["template"];
    const auto templates = with_config(dir, config);
    ChatConversation conversation;
    conversation.messages = c["messages"];
    conversation.tools = c["tools"];
    conversation.add_generation_prompt = c["add_generation_prompt"];
    if (!c["kwargs"].empty()) conversation.chat_template_kwargs = c["kwargs"];
    ++cases;
    if (c.contains("error")) {
      BOOST_TEST(error_of(templates, conversation) == c["error"].get<std::string>(), name);
      continue;
    }
    const std::string text = templates.render(conversation);
    BOOST_TEST(text == c["text"].get<std::string>(), name);
    const auto tokenizer =
        model_loader::Tokenizer::from_file(std::string(HOTSWAP_GOLDEN_DIR) + "/tokenizer/" +
                                           c["tokenizer"].get<std::string>() + "/tokenizer.json");
    BOOST_TEST(tokenizer.encode(text, false) == c["ids"].get<std::vector<std::int64_t>>(), name);
  }
  BOOST_TEST(cases == 7);
}

BOOST_AUTO_TEST_CASE(special_tokens_reach_the_template) {
  TempDir dir;
  const auto templates = with_config(
      dir, {{"bos_token", "<s>"},
            {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}, {"lstrip", false}}},
            {"additional_special_tokens", {"<a>", {{"content", "<b>"}}}},
            {"chat_template",
             "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
             "{{ additional_special_tokens | join(',') }}"}});
  BOOST_TEST(templates.render(conversation({{{"role", "user"}, {"content", "hi"}}})) ==
             "<s>hi</s><a>,<b>");
}

BOOST_AUTO_TEST_CASE(named_templates_are_chosen_as_transformers_chooses) {
  TempDir dir;
  const auto templates =
      with_config(dir, {{"chat_template",
                         {{{"name", "default"}, {"template", "plain"}},
                          {{"name", "tool_use"}, {"template", "tools: {{ tools | length }}"}},
                          {{"name", "terse"}, {"template", "t"}}}}});
  ChatConversation c = conversation(json::array());
  BOOST_TEST(templates.render(c) == "plain");
  c.tools = json::array({{{"type", "function"}}});
  BOOST_TEST(templates.render(c) == "tools: 1");
  c.chat_template = "terse";  // a name
  BOOST_TEST(templates.render(c) == "t");
  c.chat_template = "{{ 'own' }}";  // the request's own template
  BOOST_TEST(templates.render(c) == "own");

  TempDir no_default;
  const auto two = with_config(
      no_default, {{"chat_template",
                    {{{"name", "b"}, {"template", "1"}}, {{"name", "a"}, {"template", "2"}}}}});
  BOOST_TEST(error_of(two, conversation(json::array())) ==
             "This model has multiple chat templates with no default specified! Please either "
             "pass a chat template or the name of the template you wish to use to the "
             "`chat_template` argument. Available template names are ['a', 'b'].");
}

BOOST_AUTO_TEST_CASE(chat_template_jinja_and_the_flag_take_precedence) {
  TempDir dir;
  write(dir.path / "tokenizer_config.json", json{{"chat_template", "config"}}.dump());
  write(dir.path / "chat_template.jinja", "file");
  BOOST_TEST(ChatTemplates::load(dir.path).render(conversation(json::array())) == "file");
  write(dir.path / "flag.jinja", "flag file");
  BOOST_TEST(ChatTemplates::load(dir.path, (dir.path / "flag.jinja").string())
                 .render(conversation(json::array())) == "flag file");
  // Not a file: the template itself, its escapes decoded as vLLM decodes them.
  BOOST_TEST(ChatTemplates::load(dir.path, std::string(R"({{ 'a' }}\n\t\u00e9\\)"))
                 .render(conversation(json::array())) == "a\n\té\\");
  // A directory is no template file either.
  try {
    ChatTemplates::load(dir.path, dir.path.string());
    BOOST_FAIL("a directory was taken as a template");
  } catch (const protocol::ValueError& e) {
    BOOST_TEST(
        std::string(e.what()).ends_with("looks like a file path, but it failed to be opened."));
  }
  try {
    ChatTemplates::load(dir.path, std::string("templates/missing.jinja"));
    BOOST_FAIL("a path-like template that is no file was taken");
  } catch (const protocol::ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "The supplied chat template (templates/missing.jinja) looks like a file path, but "
               "it failed to be opened.");
  }
}

BOOST_AUTO_TEST_CASE(a_model_without_a_template_says_so_and_a_request_may_bring_one) {
  TempDir dir;
  const auto none = with_config(dir, {{"eos_token", "</s>"}});
  BOOST_TEST(!none.any());
  BOOST_TEST(error_of(none, conversation(json::array())) ==
             "As of transformers v4.44, default chat template is no longer allowed, so you must "
             "provide a chat template if the tokenizer does not define one.");
  ChatConversation c = conversation(json::array());
  c.chat_template = "{{ eos_token }}";
  BOOST_TEST(none.render(c) == "</s>");
  // Without tokenizer_config.json at all, the same.
  TempDir empty;
  BOOST_TEST(!ChatTemplates::load(empty.path).any());
}

BOOST_AUTO_TEST_CASE(kwargs_and_documents_are_variables) {
  TempDir dir;
  const auto templates = with_config(
      dir, {{"chat_template",
             "{{ add_generation_prompt }} {{ enable_thinking }} {{ documents[0].title }}"}});
  ChatConversation c = conversation(json::array());
  c.chat_template_kwargs = {{"enable_thinking", false}};
  c.documents = json::array({{{"title", "T"}, {"text", "x"}}});
  BOOST_TEST(templates.render(c) == "True False T");
}

// What vLLM's chat_utils hands the template: text content for a template that prints it, a list
// of text parts for one that loops over them (vLLM's "auto" content format).
BOOST_AUTO_TEST_CASE(messages_reach_the_template_as_vllm_hands_them_over) {
  const json messages = {
      {{"role", "user"},
       {"content",
        {{{"type", "text"}, {"text", "a"}}, "b", {{"type", "input_text"}, {"text", "c"}}}},
       {"name", "ann"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"reasoning_content", "why"},
       {"tool_calls",
        {{{"id", "1"},
          {"type", "function"},
          {"function", {{"name", "f"}, {"arguments", "{\"x\": 1}"}}}},
         {{"id", "2"}, {"type", "function"}, {"function", {{"name", "g"}, {"arguments", ""}}}},
         {{"id", "3"}, {"type", "function"}, {"function", {{"name", "h"}}}},
         {{"id", "4"},
          {"type", "function"},
          {"function", {{"name", "k"}, {"arguments", "[5]"}}}}}}},
      {{"role", "tool"},
       {"tool_call_id", "1"},
       {"content", {{{"type", "text"}, {"text", "r1"}}, "r2"}}}};
  TempDir text_dir;
  const auto text = with_config(text_dir, {{"chat_template", "{{ messages | tojson }}"}});
  BOOST_TEST(json::parse(text.render(conversation(messages))) ==
             json::parse(R"([{"role": "user", "content": "a\nb\nc", "name": "ann"},
                             {"thinking": "why", "role": "assistant", "content": "",
                              "tool_calls": [{"id": "1", "type": "function",
                                              "function": {"name": "f", "arguments": {"x": 1}}},
                                             {"id": "2", "type": "function",
                                              "function": {"name": "g", "arguments": {}}},
                                             {"id": "3", "type": "function", "function": {"name": "h", "arguments": {}}},
                                             {"id": "4", "type": "function", "function": {"name": "k", "arguments": [5]}}],
                              "reasoning": "why", "reasoning_content": "why"},
                             {"role": "tool", "content": "r1\nr2", "tool_call_id": "1"}])"));
  TempDir parts_dir;
  const auto parts = with_config(
      parts_dir, {{"chat_template",
                   "{% set loop_messages = messages[0:] %}{% for m in loop_messages %}"
                   "{% for p in m['content'] %}[{{ p.text }}]{% endfor %}{% endfor %}"}});
  // The assistant's content is an empty list; the tool's reply stays text, so the loop walks its
  // five characters.
  BOOST_TEST(parts.render(conversation(messages)) == "[a][b][c][][][][][]");

  BOOST_TEST(error_of(text, conversation(
                                {{{"role", "user"},
                                  {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}})) ==
             "Unsupported chat content part type: 'image_url' in messages[0]. hotswap's models "
             "take text: parts of type text, input_text, output_text, refusal or thinking");
  // Arguments as JSON text escaped the body's depth check: nested deeper than any request may,
  // they are refused, never copied (copying 500,000 levels overflowed the stack).
  auto calling = [](const json& arguments) {
    return conversation(
        {{{"role", "assistant"},
          {"content", ""},
          {"tool_calls",
           {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", arguments}}}}}}}});
  };
  BOOST_TEST(error_of(text, calling(std::string(200, '[') + std::string(200, ']'))) ==
             "a tool call's `arguments` in messages[0] nest deeper than 128 levels");
  // Arguments that are not JSON are refused, as vLLM refuses them (its json.loads raises), and
  // so is a number.
  BOOST_TEST(error_of(text, calling("[oops"))
                 .starts_with("a tool call's `arguments` in messages[0] are not JSON: "));
  // A number past double's range is refused as a bad request too (it was a parser exception of
  // another kind, answered 500).
  BOOST_TEST(error_of(text, calling("{\"x\": 1e400}"))
                 .starts_with("a tool call's `arguments` in messages[0] are not JSON: "));
  BOOST_TEST(error_of(text, calling(7)) ==
             "a tool call's `arguments` in messages[0] are neither JSON text nor an object: 7");
  BOOST_TEST(error_of(text, conversation({{{"content", "x"}}})) ==
             "messages[0] needs a `role`, a string");
  BOOST_TEST(error_of(text, conversation({"hello"})) ==
             "messages[0] is not a message (an object with a `role`): \"hello\"");
}

BOOST_AUTO_TEST_SUITE_END()
