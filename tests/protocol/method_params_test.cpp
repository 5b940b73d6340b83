#include "protocol/method_params.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap::protocol;
using nlohmann::json;

BOOST_AUTO_TEST_SUITE(method_params)

BOOST_AUTO_TEST_CASE(generate_params_have_vllms_defaults_and_checks) {
  auto p = GenerateParams::from_json({{"prompt_token_ids", {1, 2}}});
  BOOST_TEST(p.max_tokens == 16);
  BOOST_TEST(p.temperature == 1.0);
  BOOST_TEST(!p.logprobs);
  p = GenerateParams::from_json({{"prompt_token_ids", {1}},
                                 {"max_tokens", 8.0},
                                 {"seed", 3},
                                 {"stop_token_ids", {2}},
                                 {"logprobs", 0},
                                 {"temperature", nullptr}});
  BOOST_TEST(p.max_tokens == 8);
  BOOST_TEST(*p.seed == 3u);
  BOOST_TEST(p.logprobs);
  struct Case {
    json params;
    const char* needle;
  };
  const Case cases[] = {
      {{{"prompt_token_ids", json::array()}}, "`prompt_token_ids` must be a non-empty list"},
      {{{"prompt_token_ids", {1, -2}}}, "`prompt_token_ids[1]` must be a non-negative integer"},
      {{{"prompt_token_ids", {1}}, {"stop_token_ids", "x"}},
       "`stop_token_ids` must be a list of token ids, got string"},
      {{{"prompt_token_ids", {1}}, {"max_tokens", 1e300}}, "`max_tokens` must be an integer"},
      {{{"prompt_token_ids", {1}}, {"max_tokens", 0}}, "max_tokens must be at least 1"},
      {{{"prompt_token_ids", {1}}, {"temperature", -1}}, "temperature must be non-negative"},
      {{{"prompt_token_ids", {1}}, {"top_p", 0}}, "top_p must be in (0, 1]"},
      {{{"prompt_token_ids", {1}}, {"logprobs", "yes"}}, "`logprobs` must be a non-negative"},
      {{{"prompt_token_ids", {1}}, {"seed", 1.5}}, "`seed` must be an integer"},
  };
  for (const auto& c : cases) {
    HOTSWAP_CHECK_THROW_MSG(GenerateParams::from_json(c.params), ValueError, c.needle);
  }
}

BOOST_AUTO_TEST_CASE(every_method_validates_its_body_without_a_worker) {
  validate_params("health", json::object());
  validate_params("update_weights", {{"update_info", json::array()}});
  HOTSWAP_CHECK_THROW_MSG(validate_params("init_weight_transfer_engine", json::object()),
                          ValueError, "Missing 'init_info' in request body");
  HOTSWAP_CHECK_THROW_MSG(validate_params("update_weights", {{"update_info", {1}}}), ValueError,
                          "`update_info[0]` must be a JSON object");
  HOTSWAP_CHECK_THROW_MSG(validate_params("update_weight_version", json::object()), ValueError,
                          "Missing 'new_version' in request body");
  HOTSWAP_CHECK_THROW_MSG(validate_params("pause", {{"mode", "sleep"}}), ValueError,
                          "Invalid pause mode 'sleep': expected abort, wait or keep");
  HOTSWAP_CHECK_THROW_MSG(validate_params("weight_checker", {{"action", "compare"}}), ValueError,
                          "action='compare' requires a 'baseline' object");
  // hotswap's lora_name: an adapter's checksums are of its tensors as they arrived, and a reset
  // zeroes the model alone.
  validate_params("weight_checker", {{"action", "checksum"}, {"lora_name", "a"}});
  HOTSWAP_CHECK_THROW_MSG(
      validate_params("weight_checker", {{"action", "reset"}, {"lora_name", "a"}}), ValueError,
      "takes no 'lora_name'");
  HOTSWAP_CHECK_THROW_MSG(
      validate_params("weight_checker",
                      {{"action", "checksum"}, {"format", "runtime"}, {"lora_name", "a"}}),
      ValueError, "format='checkpoint' (or none) with 'lora_name'");
  HOTSWAP_CHECK_THROW_MSG(validate_params("finish_weight_update", {{"weight_version", 3}}),
                          ValueError, "`weight_version` must be a string");
  HOTSWAP_CHECK_THROW_MSG(validate_params("nope", json::object()), MethodNotFound,
                          "Method not found: 'nope'");
  HOTSWAP_CHECK_THROW_MSG(validate_params("tokenize", json::object()), ValueError,
                          "tokenize needs `prompt`, a string");
  HOTSWAP_CHECK_THROW_MSG(validate_params("tokenize", {{"prompt", "a"}, {"add_special_tokens", 1}}),
                          ValueError, "add_special_tokens");
  HOTSWAP_CHECK_THROW_MSG(validate_params("detokenize", {{"tokens", {1, -2}}}), ValueError,
                          "`tokens[1]` must be a non-negative integer token id");
  HOTSWAP_CHECK_THROW_MSG(validate_params("detokenize", json::object()), ValueError,
                          "detokenize needs `tokens`");
  HOTSWAP_CHECK_THROW_MSG(validate_params("abort_requests", {{"request_ids", {"a", 1}}}),
                          ValueError, "request_ids");
  BOOST_CHECK_NO_THROW(validate_params("abort_requests", {{"request_ids", {"cmpl-a-0"}}}));
  HOTSWAP_CHECK_THROW_MSG(validate_params("load_lora_adapter", {{"lora_name", "a"}}), ValueError,
                          "Both 'lora_name' and 'lora_path' must be provided.");
  HOTSWAP_CHECK_THROW_MSG(validate_params("unload_lora_adapter", json::object()), ValueError,
                          "unload_lora_adapter needs `lora_name`");
  BOOST_TEST(method_names().size() == 25u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(completion_params)

BOOST_AUTO_TEST_CASE(reads_every_prompt_shape_and_vllms_defaults) {
  auto p = CompletionParams::from_json({{"prompt", "hi"}});
  BOOST_TEST(p.prompts.size() == 1u);
  BOOST_TEST(*p.prompts[0].text == "hi");
  BOOST_TEST(*p.max_tokens == 16);
  BOOST_TEST(p.n == 1);
  BOOST_TEST(p.temperature == 1.0);
  BOOST_TEST(p.skip_special_tokens);
  BOOST_TEST(!p.logprobs.has_value());
  p = CompletionParams::from_json({{"prompt", {1, 2, 3}}});
  BOOST_TEST((p.prompts.at(0).token_ids == std::vector<std::int64_t>{1, 2, 3}));
  BOOST_TEST(!p.prompts[0].text.has_value());
  p = CompletionParams::from_json({{"prompt", {"a", "b"}}, {"max_tokens", nullptr}});
  BOOST_TEST(p.prompts.size() == 2u);
  BOOST_TEST(!p.max_tokens.has_value());
  p = CompletionParams::from_json({{"prompt", {{1}, {2, 3}}}, {"stop", "x"}, {"top_k", -1}});
  BOOST_TEST(p.prompts.size() == 2u);
  BOOST_TEST((p.stop == std::vector<std::string>{"x"}));
  BOOST_TEST(p.top_k == 0);  // vLLM's -1 is "all"
  p = CompletionParams::from_json(
      {{"prompt", "a"}, {"stream", true}, {"stream_options", json::object()}, {"foo", 1}});
  BOOST_TEST(p.include_usage);  // vLLM's StreamOptions default
  BOOST_TEST((p.ignored_fields == std::vector<std::string>{"foo"}));
  // Fields vLLM has that change nothing at their defaults are accepted.
  p = CompletionParams::from_json(
      {{"prompt", "a"}, {"frequency_penalty", 0}, {"best_of", nullptr}, {"suffix", nullptr}});
  BOOST_TEST(p.ignored_fields.empty());
}

BOOST_AUTO_TEST_CASE(bad_requests_get_vllms_messages) {
  auto refused = [](json body, const std::string& message) {
    HOTSWAP_CHECK_THROW_MSG(validate_params("completions", body), ValueError, message);
  };
  refused(json::object(), "Either prompt or prompt_embeds must be provided and non-empty.");
  refused({{"prompt", ""}}, "Either prompt or prompt_embeds must be provided and non-empty.");
  refused({{"prompt", json::array()}}, "please provide at least one prompt");
  refused({{"prompt", 5}}, "`prompt` must be a string, a list of token ids, or a list of either");
  refused({{"prompt", {1, -1}}}, "`prompt[1]` must be a non-negative integer token id");
  refused({{"prompt", {"a", 3}}}, "`prompt[1]` must be a string or a list of token ids");
  refused({{"prompt", "a"}, {"max_tokens", "8"}}, "`max_tokens` must be an integer");
  refused({{"prompt", "a"}, {"max_tokens", 0}}, "max_tokens must be at least 1, got 0.");
  refused({{"prompt", "a"}, {"n", 0}}, "n must be at least 1, got 0.");
  refused({{"prompt", "a"}, {"n", 20000}}, "n must be at most 16384, got 20000.");
  refused({{"prompt", "a"}, {"n", 2}, {"temperature", 0}},
          "n must be 1 when using greedy sampling, got 2.");
  refused({{"prompt", "a"}, {"temperature", -1}}, "temperature must be non-negative");
  refused({{"prompt", "a"}, {"top_p", 0}}, "top_p must be in (0, 1]");
  refused({{"prompt", "a"}, {"top_k", -3}}, "top_k must be 0 (disable), or at least 1, got -3.");
  refused({{"prompt", "a"}, {"logprobs", 21}},
          "Requested sample logprobs of 21, which is greater than max allowed: 20");
  refused({{"prompt", "a"}, {"logprobs", -1}}, "`logprobs` must be a positive value.");
  refused({{"prompt", "a"}, {"stop", {"x", ""}}}, "stop cannot contain an empty string.");
  refused({{"prompt", "a"}, {"stream_options", {{"include_usage", true}}}},
          "Stream options can only be defined when `stream=True`.");
  refused({{"prompt", "a"}, {"stream", "yes"}}, "`stream` must be true or false");
  refused({{"prompt", "a"}, {"presence_penalty", 0.5}},
          "`presence_penalty` is not supported by hotswap's completions");
  refused({{"prompt", "a"}, {"best_of", 3}}, "`best_of` is not supported");
  // echo with max_tokens 0 gives the prompt back.
  BOOST_TEST(*CompletionParams::from_json({{"prompt", "a"}, {"echo", true}, {"max_tokens", 0}})
                  .max_tokens == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(chat_params)

nlohmann::ordered_json chat(nlohmann::ordered_json extra = nlohmann::ordered_json::object()) {
  nlohmann::ordered_json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [key, value] : extra.items())
    body[key] = value;
  return body;
}

BOOST_AUTO_TEST_CASE(reads_vllms_defaults_and_keeps_the_conversations_key_order) {
  auto p = ChatCompletionParams::from_json(chat(
      {{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"description", "d"}}}}}}}));
  BOOST_TEST(!p.completion.max_tokens.has_value());  // chat's default: what the context leaves
  BOOST_TEST(!p.completion.add_special_tokens);
  BOOST_TEST(p.conversation.add_generation_prompt);
  BOOST_TEST(p.completion.prompts.empty());
  BOOST_TEST(p.conversation.tools.dump() ==
             R"([{"type":"function","function":{"name":"f","description":"d"}}])");
  p = ChatCompletionParams::from_json(chat(
      {{"max_tokens", 5}, {"max_completion_tokens", 7}, {"logprobs", true}, {"top_logprobs", 3}}));
  BOOST_TEST(*p.completion.max_tokens == 7);
  BOOST_TEST(*p.completion.logprobs == 3);
  BOOST_TEST(p.top_logprobs == 3);
}

BOOST_AUTO_TEST_CASE(refuses_what_vllm_refuses_in_its_words) {
  auto refused = [](nlohmann::ordered_json extra) {
    try {
      ChatCompletionParams::from_json(chat(std::move(extra)));
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  BOOST_TEST(refused({{"continue_final_message", true}}) ==
             "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  BOOST_TEST(refused({{"top_logprobs", 2}}) ==
             "when using `top_logprobs`, `logprobs` must be set to true.");
  BOOST_TEST(refused({{"logprobs", true}, {"top_logprobs", -2}}) ==
             "`top_logprobs` must be a positive value or -1.");
  BOOST_TEST(refused({{"logprobs", true}, {"top_logprobs", 21}}) ==
             "Requested sample logprobs of 21, which is greater than max allowed: 20");
  BOOST_TEST(refused({{"tools", nlohmann::ordered_json::array()}}) ==
             "`tools` must not be an empty array. Either provide at least one tool or omit the "
             "field entirely.");
  BOOST_TEST(refused({{"tool_choice", "auto"}}) ==
             "When using `tool_choice`, `tools` must be set.");
  BOOST_TEST(refused({{"tool_choice", "sometimes"}}) ==
             "Invalid value for `tool_choice`: sometimes! Only named tools, \"none\", \"auto\" or "
             "\"required\" are supported.");
  BOOST_TEST(refused({{"tools", {{{"type", "function"}}}}, {"tool_choice", "required"}})
                 .starts_with("`tool_choice` \"required\" needs a tool-call parser"));
  BOOST_TEST(refused({{"chat_template_kwargs", {{"tokenize", true}}}}) ==
             "Found unexpected chat template kwargs from request: {'tokenize'}");
  BOOST_TEST(refused({{"chat_template_kwargs", {{"messages", 1}}}}) ==
             "chat_template_kwargs cannot set `messages`: it is the request's own field");
  BOOST_TEST(refused({{"response_format", {{"type", "json_object"}}}})
                 .starts_with("`response_format` is not supported"));
  BOOST_TEST(refused({{"stream_options", {{"include_usage", true}}}}) ==
             "Stream options can only be defined when `stream=True`.");
  BOOST_TEST(refused({{"tools", {{{"type", "function"}}}}, {"tool_choice", "none"}}) == "accepted");
  HOTSWAP_CHECK_THROW_MSG(ChatCompletionParams::from_json({{"model", "x"}}), ValueError,
                          "the request needs `messages`, a list");
  HOTSWAP_CHECK_THROW_MSG(TokenizeChatParams::from_json(chat(
                              {{"add_generation_prompt", true}, {"continue_final_message", true}})),
                          ValueError, "Cannot set both");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(control_method_table)

BOOST_AUTO_TEST_CASE(each_method_has_vllms_route_and_one_validator) {
  std::set<std::string_view> names;
  for (const auto& m : control_methods()) {
    BOOST_TEST_CONTEXT(m.name) {
      BOOST_TEST(names.insert(m.name).second);  // named once
      BOOST_TEST((m.validate != nullptr));
      if (m.http_verb == HttpVerb::kNone) {
        BOOST_TEST(m.http_route.empty());
      } else {
        // vLLM's routes are its names; the OpenAI-compatible ones live under /v1/ (chat's
        // `chat_completions` at /v1/chat/completions, the LoRA routes keeping their
        // underscores) but for /tokenize and /detokenize, which vLLM serves at the root.
        const bool v1 = m.openai && m.name != "tokenize" && m.name != "detokenize";
        std::string route(m.name);
        if (v1 && !route.ends_with("lora_adapter"))
          std::replace(route.begin(), route.end(), '_', '/');
        BOOST_TEST(m.http_route == (v1 ? "/v1/" : "/") + route);
      }
      // A GET carries no body; a route reads its params from one place.
      if (m.http_verb == HttpVerb::kGet) BOOST_TEST(!m.takes_json_body);
      BOOST_TEST(!(m.takes_json_body && !m.query_fields.empty()));
      // Only a call that may take long can be cancelled midway.
      if (m.cancelled_when_caller_leaves) BOOST_TEST(m.long_running);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_weight_calls_carry_vllms_metric_operation_names) {
  std::map<std::string_view, std::string_view> ops;
  for (const auto& m : control_methods()) {
    if (!m.metric_operation.empty()) ops[m.name] = m.metric_operation;
  }
  const std::map<std::string_view, std::string_view> vllm{
      {"init_weight_transfer_engine", "init"},
      {"shutdown_weight_transfer_engine", "shutdown"},
      {"start_weight_update", "start"},
      {"start_draft_weight_update", "start_draft"},
      {"update_weights", "update"},
      {"finish_weight_update", "finish"}};  // vLLM 0.34 times no set_version
  BOOST_TEST((ops == vllm));
}

BOOST_AUTO_TEST_CASE(quick_methods_answer_on_the_socket_thread) {
  for (auto name : {"health", "weight_info", "is_paused", "get_world_size", "update_weight_version",
                    "resume"}) {
    BOOST_TEST(!control_method(name).long_running, name);
  }
  for (auto name : {"update_weights", "pause", "generate", "weight_checker", "shutdown"}) {
    BOOST_TEST(control_method(name).long_running, name);
  }
  HOTSWAP_CHECK_THROW_MSG(control_method("nope"), MethodNotFound, "Method not found: 'nope'");
  BOOST_TEST(find_control_method("nope") == nullptr);
}

BOOST_AUTO_TEST_CASE(generations_answer_when_their_run_ends) {
  // Started on the socket's thread and answered later, holding no thread: the two whose start is
  // quick. A chat completion renders its template first, on the pool.
  std::set<std::string_view> later;
  for (const auto& m : control_methods()) {
    if (!m.answered_when_done) continue;
    later.insert(m.name);
    BOOST_TEST(m.long_running, m.name);
  }
  BOOST_TEST((later == std::set<std::string_view>{"generate", "completions"}));
}

BOOST_AUTO_TEST_CASE(the_json_form_lists_every_method_in_table_order) {
  json table = control_methods_json();
  BOOST_TEST(table["methods"].size() == control_methods().size());
  BOOST_TEST(table["methods"][0]["name"] == "init_weight_transfer_engine");
  json pause = table["methods"][8];
  BOOST_TEST(pause == json({{"name", "pause"},
                            {"http_verb", "POST"},
                            {"http_route", "/pause"},
                            {"query_fields", {"mode", "clear_cache"}},
                            {"takes_json_body", false},
                            {"long_running", true},
                            {"openai", false},
                            {"probe", false},
                            {"http_content_type", nullptr},
                            {"metric_operation", nullptr},
                            {"keeps_key_order", false},
                            {"runs_on_every_rank", false}}));
}

// The ranks of a tensor-parallel worker run each weight-transfer call's part and read an adapter
// onto their shards; the table says which methods, in the method's own row.
BOOST_AUTO_TEST_CASE(the_table_names_the_methods_every_rank_runs) {
  std::vector<std::string_view> every_rank;
  for (const auto& m : control_methods())
    if (m.runs_on_every_rank) every_rank.push_back(m.name);
  BOOST_TEST(every_rank == (std::vector<std::string_view>{
                               "init_weight_transfer_engine", "shutdown_weight_transfer_engine",
                               "start_weight_update", "update_weights", "finish_weight_update",
                               "load_lora_adapter"}),
             boost::test_tools::per_element());
  BOOST_TEST(control_methods_json()["methods"][0]["runs_on_every_rank"] == true);
}

// generate and completions read their sampling fields through one validator: the same field
// out of range gets the same message from both (vLLM's).
BOOST_AUTO_TEST_CASE(generate_and_completions_share_one_sampling_validator) {
  for (const auto& [field, value, message] :
       std::vector<std::tuple<std::string, json, std::string>>{
           {"temperature", -1, "temperature must be non-negative, got -1.000000."},
           {"top_p", 0, "top_p must be in (0, 1], got 0.000000."},
           {"top_k", -3, "top_k must be 0 (disable), or at least 1, got -3."},
           {"min_p", 2, "min_p must be in [0, 1], got 2.000000."},
       }) {
    json generate = {{"prompt_token_ids", {1}}, {field, value}};
    json completion = {{"prompt", "a"}, {field, value}};
    for (const json& params : {generate, completion}) {
      try {
        if (params.contains("prompt")) {
          CompletionParams::from_json(params);
        } else {
          GenerateParams::from_json(params);
        }
        BOOST_FAIL("accepted " + params.dump());
      } catch (const ValueError& e) {
        BOOST_TEST(std::string(e.what()) == message);
      }
    }
  }
  auto g = GenerateParams::from_json({{"prompt_token_ids", {1}}, {"top_k", -1}, {"min_p", 0.5}});
  BOOST_TEST(g.top_k == 0);  // vLLM's -1, "all"
  BOOST_TEST(g.min_p == 0.5);
}

BOOST_AUTO_TEST_CASE(probes_and_text_routes_come_from_the_table) {
  std::vector<std::string_view> probes;
  for (const auto& m : control_methods())
    if (m.probe) probes.push_back(m.http_route);
  BOOST_TEST(probes == (std::vector<std::string_view>{"/health", "/metrics"}),
             boost::test_tools::per_element());
  BOOST_TEST(control_method("metrics").http_content_type == "text/plain; version=0.0.4");
  BOOST_TEST(control_method("health").http_content_type.empty());
}

BOOST_AUTO_TEST_SUITE_END()
