// Chat templates rendered by the embedded Jinja2: character for character what transformers'
// render_jinja_template renders (golden vectors, tests/golden/make_chat_template_golden.py),
// the same errors, and the bounds a template from a request cannot pass.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/errors.hpp"
#include "worker/serving/jinja_renderer.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using json = nlohmann::ordered_json;
using worker::JinjaRenderer;
using worker::RenderLimits;

namespace {

json golden_cases() {
  std::ifstream in(std::string(HOTSWAP_GOLDEN_DIR) + "/chat_template/golden.json");
  BOOST_REQUIRE(in.good());
  return json::parse(in)["cases"];
}

// The message of the ValueError `source` renders to, or "" where it renders.
std::string error_of(const std::string& source, const json& variables,
                     const RenderLimits& limits = {}) {
  try {
    JinjaRenderer::instance().render(source, variables, limits);
  } catch (const protocol::ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(jinja_renderer)

BOOST_AUTO_TEST_CASE(renders_what_transformers_renders_and_fails_as_it_fails) {
  int cases = 0;
  for (const auto& c : golden_cases()) {
    const std::string name = c["name"];
    const std::string source = c["template"];
    if (c.contains("rendered")) {
      BOOST_TEST(JinjaRenderer::instance().render(source, c["variables"]) ==
                     c["rendered"].get<std::string>(),
                 name);
    } else {
      BOOST_TEST(error_of(source, c["variables"]) == c["error"].get<std::string>(), name);
    }
    ++cases;
  }
  BOOST_TEST(cases == 11);
}

BOOST_AUTO_TEST_CASE(a_render_is_bounded_in_time) {
  RenderLimits limits;
  limits.time = 300ms;
  const auto start = std::chrono::steady_clock::now();
  const std::string message =
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               json::object(), limits);
  BOOST_TEST(message == "the chat template did not render within 0.3 s");
  BOOST_TEST((std::chrono::steady_clock::now() - start < 5s));
}

BOOST_AUTO_TEST_CASE(a_render_is_bounded_in_output) {
  RenderLimits limits;
  limits.max_chars = 1000;
  BOOST_TEST(error_of("{% for i in range(200) %}0123456789{% endfor %}", json::object(), limits) ==
             "the chat template's output is limited to 1000 characters");
  // One `*` (or `**`) would build its whole result in C before any bound could look at it.
  BOOST_TEST(error_of("{{ 'ab' * 1000000000 }}", json::object(), limits) ==
             "the chat template's output is limited to 1000 characters, and a `*` in it would "
             "make 2000000000");
  BOOST_TEST(error_of("{{ (messages * 600) | length }}", {{"messages", {1, 2}}}, limits) ==
             "the chat template's output is limited to 1000 characters, and a `*` in it would "
             "make 1200");
  BOOST_TEST(error_of("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                      "{% set ns.s = ns.s + ns.s %}{% endfor %}",
                      json::object(), limits) ==
             "the chat template's output is limited to 1000 characters, and a `+` in it would "
             "make 1024");
  BOOST_TEST(error_of("{{ 10 ** 100000000 }}", json::object(), limits) ==
             "the chat template raises 10 to the power 100000000, past its bounds");
  // Within the bounds, the same operators work.
  BOOST_TEST(JinjaRenderer::instance().render("{{ 'ab' * 3 }} {{ 2 ** 10 }} {{ 3 * 4 }}",
                                              json::object(), limits) == "ababab 1024 12");
  limits.max_template_bytes = 10;
  BOOST_TEST(error_of("{{ messages }}{{ messages }}", json::object(), limits) ==
             "the chat template has 28 bytes; at most 10 are taken");
}

BOOST_AUTO_TEST_CASE(variables_are_a_json_object) {
  BOOST_CHECK_THROW(JinjaRenderer::instance().render("x", json::array()), protocol::ValueError);
  // A JSON object's members are the template's variables, names of the renderer's own included.
  BOOST_TEST(JinjaRenderer::instance().render(
                 "{{ source }}-{{ variables }}-{{ seconds }}",
                 {{"source", 1}, {"variables", "v"}, {"seconds", 2}}) == "1-v-2");
}

BOOST_AUTO_TEST_CASE(renders_from_many_threads) {
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const json variables = {{"n", t * 100 + i}};
        const std::string got = JinjaRenderer::instance().render(
            "{% for k in range(3) %}{{ n }};{% endfor %}", variables);
        const std::string n = std::to_string(t * 100 + i);
        if (got != n + ";" + n + ";" + n + ";") ++wrong[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  BOOST_TEST(wrong == std::vector<int>(4, 0), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_interpreter_runs_debians_jinja2) {
  // python3-jinja2 3.1.2 with Debian's security fixes (+deb12u3: the sandbox escapes that made
  // transformers ask for 3.1.6).
  BOOST_TEST(JinjaRenderer::instance().jinja_version().starts_with("3."));
}

BOOST_AUTO_TEST_SUITE_END()
