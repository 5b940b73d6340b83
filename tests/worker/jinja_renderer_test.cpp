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

// A single C call builds its whole result before a time or output bound can look at it: the
// interpreter's memory is counted, and a render past its budget fails alone.
BOOST_AUTO_TEST_CASE(a_render_is_bounded_in_memory) {
  const std::string memory = "the chat template needed more than 256 MiB of memory to render";
  BOOST_TEST(error_of("{{ 'x' | center(1500000000) }}", json::object()) == memory);
  BOOST_TEST(error_of("{{ '%1500000000s' % 'x' }}", json::object()) == memory);
  // `~` joins strings unchecked by the output bound: grown a megabyte at a time, the string
  // passes a smaller budget long before the time bound.
  RenderLimits limits;
  limits.max_memory_bytes = 16 << 20;
  BOOST_TEST(error_of("{% set ns = namespace(s='') %}{% for i in range(100) %}"
                      "{% set ns.s = ns.s ~ ('x' * 1000000) %}{% endfor %}{{ ns.s | length }}",
                      json::object(),
                      limits) == "the chat template needed more than 16 MiB of memory to render");
  // The budget grows with what the template reads, which it may copy.
  const json big = {{"text", std::string(8 << 20, 'y')}};
  BOOST_TEST(JinjaRenderer::instance().render("{{ (text ~ text) | length }}", big, limits) ==
             std::to_string(16 << 20));
  // And the renderer goes on.
  BOOST_TEST(JinjaRenderer::instance().render("{{ 'ok' | center(6) }}", json::object()) ==
             "  ok  ");
}

// vLLM's "auto" content format, as vLLM finds it in the template's syntax tree: a loop over a
// message's content (the message a loop variable over `messages`, or over a name set from it,
// read through filters, tests and slices), or over a name `content`.
BOOST_AUTO_TEST_CASE(finds_loops_over_a_messages_content_as_vllm_does) {
  auto loops = [](const std::string& source) {
    return JinjaRenderer::instance().iterates_over_content(source);
  };
  BOOST_TEST(loops("{% for m in messages %}{% for p in m['content'] %}{% endfor %}{% endfor %}"));
  BOOST_TEST(!loops("{% for m in messages %}{{ m['content'] }}{% endfor %}"));
  BOOST_TEST(
      loops("{% for m in messages | selectattr('role', 'equalto', 'user') %}"
            "{% for p in m.content | selectattr('type', 'equalto', 'text') %}{% endfor %}"
            "{% endfor %}"));
  BOOST_TEST(
      loops("{% set a = messages[1:] %}{% set b = a | list %}{% for m in b %}"
            "{% for p in m.content %}{% endfor %}{% endfor %}"));
  // Names set from each other in a circle end the search (they are still the messages).
  BOOST_TEST(
      loops("{% set a = messages %}{% set b = a %}{% set a = b %}{% for m in a %}"
            "{% for p in m.content %}{% endfor %}{% endfor %}"));
  // A loop over anything named `content` counts, as in vLLM.
  BOOST_TEST(loops("{% set content = 'abc' %}{% for c in content %}{{ c }}{% endfor %}"));
  // A loop over the messages (or a name set from them) that binds more than one name makes the
  // search give up: text.
  BOOST_TEST(
      !loops("{% for a, b in messages %}{% endfor %}{% for m in messages %}"
             "{% for p in m.content %}{% endfor %}{% endfor %}"));
  BOOST_TEST(!loops("{% for m in messages %}{% for k, v in m.content %}{% endfor %}{% endfor %}"));
  BOOST_TEST(
      !loops("{% set x, y = messages %}{% for m in messages %}{% for p in m.content %}"
             "{% endfor %}{% endfor %}"));
  BOOST_TEST(!loops("{% for m in messages %}"));  // does not parse
  // The content of something that is not a message does not count.
  BOOST_TEST(!loops("{% for t in tools %}{% for p in t.content %}{% endfor %}{% endfor %}"));
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
