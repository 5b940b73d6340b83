// hotswap_chat_template_bench: the time a chat request's template takes, per request, in the
// worker's embedded Jinja2 (ChatTemplates::render: the conversation converted as vLLM converts
// it, its content format found, the template rendered) against transformers'
// apply_chat_template on the same conversations and templates (bench/chat_template_peer.py via
// HOTSWAP_PEER_PYTHON; without it the run says it skipped the peer). The conversations are the
// golden "applied" cases (tests/golden/chat_template/golden.json: real templates' styles, tools,
// tool calls, reasoning). Each repetition times hotswap, then the peer; the median and the p99
// render time of each, as rates, and hotswap's time as a multiple of transformers'.
//
// Usage: hotswap_chat_template_bench [--renders N] [--reps N] [--json]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "worker/routes/chat_completions/chat_templates.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ordered_json = nlohmann::ordered_json;

namespace {

struct Case {
  worker::ChatTemplates templates;
  worker::ChatConversation conversation;
  std::string text;
};

// The golden cases that render, each with its template in a model directory of its own.
std::vector<Case> load_cases(const fs::path& golden, const fs::path& scratch) {
  std::ifstream in(golden);
  const ordered_json doc = ordered_json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : doc["applied"]) {
    if (!c.contains("text")) continue;
    const fs::path dir = scratch / c["name"].get<std::string>();
    fs::create_directories(dir);
    ordered_json config = c["special"];
    config["chat_template"] = c["template"];
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    worker::ChatConversation conversation;
    conversation.messages = c["messages"];
    conversation.tools = c["tools"];
    conversation.add_generation_prompt = c["add_generation_prompt"];
    if (!c["kwargs"].empty()) conversation.chat_template_kwargs = c["kwargs"];
    cases.push_back({worker::ChatTemplates::load(dir), std::move(conversation), c["text"]});
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, renders = 200;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--renders" && i + 1 < argc) {
      renders = std::stoi(argv[++i]);
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (arg == "--json") {
      bench::json_only() = true;
    } else {
      std::cerr << "hotswap_chat_template_bench: unknown argument '" << arg
                << "' (usage: hotswap_chat_template_bench [--renders N] [--reps N] [--json])\n";
      return 2;
    }
  }
  if (bench::peer_python() == nullptr) bench::say_peer_skipped();
  const fs::path golden = fs::path(HOTSWAP_GOLDEN_DIR) / "chat_template" / "golden.json";
  const fs::path scratch =
      fs::temp_directory_path() / ("hotswap-chat-bench-" + std::to_string(::getpid()));
  const auto cases = load_cases(golden, scratch);
  for (const auto& c : cases) {
    if (c.templates.render(c.conversation) != c.text) {  // also the warm-up
      std::cerr << "hotswap_chat_template_bench: a case renders other than transformers\n";
      return 1;
    }
  }
  std::vector<double> median_rate, p99_rate, peer_median_rate, peer_p99_rate;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> times;
    for (const auto& c : cases) {
      for (int i = 0; i < renders; ++i) {
        const auto start = Clock::now();
        (void)c.templates.render(c.conversation);
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    }
    median_rate.push_back(1e6 / bench::percentile(times, 0.5));
    p99_rate.push_back(1e6 / bench::percentile(times, 0.99));
    if (auto peer = bench::run_peer(HOTSWAP_BENCH_DIR, "chat_template_peer.py",
                                    {golden.string(), std::to_string(renders)})) {
      peer_median_rate.push_back(1e6 / (*peer)["median_us"].get<double>());
      peer_p99_rate.push_back(1e6 / (*peer)["p99_us"].get<double>());
    }
  }
  fs::remove_all(scratch);
  const nlohmann::json extra = {{"cases", cases.size()}, {"renders_per_case", renders}};
  if (peer_median_rate.size() == median_rate.size()) {
    bench::report_against_limit("chat_template", "render, median", median_rate, peer_median_rate,
                                "renders/s", "ratio_of_transformers_time", true, extra);
    bench::report_against_limit("chat_template", "render, p99", p99_rate, peer_p99_rate,
                                "renders/s", "ratio_of_transformers_time", true, extra);
  } else {
    bench::report_spread("chat_template", "render, median", median_rate, "renders/s", extra);
    bench::report_spread("chat_template", "render, p99", p99_rate, "renders/s", extra);
  }
  return 0;
}
