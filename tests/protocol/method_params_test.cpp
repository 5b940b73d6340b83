#include "protocol/method_params.hpp"

#include <boost/test/unit_test.hpp>

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
      {{{"prompt_token_ids", {1}}, {"temperature", -1}}, "temperature must be a non-negative"},
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
  HOTSWAP_CHECK_THROW_MSG(validate_params("finish_weight_update", {{"weight_version", 3}}),
                          ValueError, "`weight_version` must be a string");
  HOTSWAP_CHECK_THROW_MSG(validate_params("nope", json::object()), MethodNotFound,
                          "Method not found: 'nope'");
  BOOST_TEST(method_names().size() == 16u);
}

BOOST_AUTO_TEST_SUITE_END()
