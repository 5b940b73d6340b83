// hotswap_serving_updates_bench: what a client sees while a trainer pushes new weights into the
// worker serving it. A worker ("serving") answers N concurrent streaming /v1/completions (greedy,
// ignore_eos, long outputs, each client asking again as soon as its stream ends) while the bench's
// trainer pushes verified rounds into it; then, with the same clients on the same worker, the same
// trainer pushes the same rounds into a second, idle worker ("idle"). The machine's contention is
// the same in both phases (the trainer's copies, checksums and threads); only the update path of
// the serving worker differs. So the figure is the ratio of the two: the inter-token gaps a client
// sees inside the update windows (p50, p99, longest) pushing into the serving worker, over the
// same gaps pushing into the idle one. A comparison against quiet serving would measure the
// trainer's CPU use on a small machine, not hotswap.
//
// Also per configuration: tokens/s of both phases, each round's time, requests that failed, were
// aborted or were refused (503 under a pause), and the version labels: every stream asks for
// `weight_versions`, and the labels are checked against the weights on the idle worker holding
// each version, by teacher forcing (the logprob that version gives the stream's token after the
// same prefix): a first span's last token must get the logprob the stream reported, and the
// first token after a commit must not get it from the version before (the rounds alternate
// between two unrelated weight sets, so a label one step late or early is caught either way).
//
// Rounds go over shm, gloo or disk, in `staged` and `inplace` mode, without a pause and with each
// pause mode (`keep`, `wait`, `abort`: pause, push, resume, as an RL loop does around a round), on
// a small float32 Qwen2 and the 442 MB bfloat16 bench Llama. Repetitions interleave the two phases;
// figures are medians with their range.
//
// Usage: hotswap_serving_updates_bench [--reps N] [--rounds N] [--streams N]... [--plane P]...
//          [--mode staged|inplace]... [--pause none|keep|wait|abort]... [--size small|442MB]...
//          [--checks N] [--json]
//        Without --pause, each plane and mode runs without a pause, and the pause modes run on
//        shm, staged, at 8 streams.
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "bench/completion_stream_clients.hpp"
#include "bench/trainer_engines.hpp"
#include "model_loader/checkpoint.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "transport/child_process.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::ClientPool;
using bench::Clock;
using bench::Stream;
using nlohmann::json;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// ---- the models ----------------------------------------------------------------------------

struct ModelCase {
  std::string name;
  model_loader::ModelConfig config;
  int max_tokens;            // each stream's length: long enough to span a round
  int rounds;                // per phase and repetition: enough windows for a p99
  double logprob_tolerance;  // batched against alone, in the model's dtype
};

ModelCase small_model() {
  return {"small", bench::small_qwen2(), 192, 10, 1e-3};  // rounds of about 50 ms
}

ModelCase bench_llama() {
  return {"442MB", bench::llama_of_size(0.5), 32, 2, 0.1};  // rounds of about 1 s
}

// ---- figures of one phase --------------------------------------------------------------------

struct Window {
  Clock::time_point start, end;
};

struct PhaseFigures {
  double gap_p50 = 0, gap_p99 = 0, gap_max = 0;  // ms, of the gaps that touch a window
  double tokens_per_second = 0;
  std::size_t gaps = 0;
};

PhaseFigures phase_figures(const std::vector<Stream>& streams, const std::vector<Window>& windows,
                           Clock::time_point from, Clock::time_point to) {
  std::vector<double> gaps;
  std::size_t tokens = 0;
  for (const Stream& s : streams) {
    for (std::size_t i = 0; i < s.arrivals.size(); ++i) {
      if (s.arrivals[i] >= from && s.arrivals[i] <= to) ++tokens;
      if (i == 0) continue;
      const auto a = s.arrivals[i - 1], b = s.arrivals[i];
      for (const Window& w : windows) {
        if (a <= w.end && b >= w.start) {
          gaps.push_back(ms_between(a, b));
          break;
        }
      }
    }
  }
  PhaseFigures f;
  f.gaps = gaps.size();
  f.gap_p50 = bench::percentile(gaps, 0.50);
  f.gap_p99 = bench::percentile(gaps, 0.99);
  f.gap_max = gaps.empty() ? 0 : *std::max_element(gaps.begin(), gaps.end());
  f.tokens_per_second = static_cast<double>(tokens) / (ms_between(from, to) / 1000);
  return f;
}

// ---- the version check -----------------------------------------------------------------------

// A token to regenerate: under weight set `set`, from the stream's prompt and output before
// `position`, it must (or, after a commit, must not) be what the stream got.
struct Check {
  const Stream* stream;
  std::size_t position;
  int set;
  bool must_match;
};

// ---- one configuration -------------------------------------------------------------------------

struct Config {
  std::string plane, mode, pause;
  int streams;
};

std::string describe(const ModelCase& m, const Config& c) {
  return m.name + " " + c.plane + " " + c.mode + (c.pause == "none" ? "" : " pause " + c.pause) +
         ", " + std::to_string(c.streams) + " streams";
}

// The bench's trainer: one weight source whose tensors it sets to either of two unrelated weight
// sets before each round, and an engine per worker.
class Trainer {
 public:
  Trainer(const fs::path& set0, const fs::path& set1) {
    for (const fs::path& dir : {set0, set1}) {
      auto checkpoint = model_loader::Checkpoint::open(dir);
      std::vector<at::Tensor> set;
      for (const auto& name : checkpoint.names()) {
        set.push_back(checkpoint.tensor(name).clone());
        if (sets_.empty()) names_.push_back(name);
      }
      sets_.push_back(std::move(set));
    }
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (std::size_t i = 0; i < names_.size(); ++i) {
      tensors.emplace_back(names_[i], sets_[0][i].clone());
      largest_ = std::max<std::int64_t>(largest_, sets_[0][i].nbytes());
    }
    held_ = tensors;
    source_ = std::make_shared<trainer_sdk::TensorListSource>(std::move(tensors));
  }
  std::shared_ptr<trainer_sdk::WeightSource> source() const { return source_; }
  std::int64_t largest_tensor_bytes() const { return largest_; }
  // The source holds weight set `set` from now on (outside any timed window).
  void hold(int set) {
    for (std::size_t i = 0; i < held_.size(); ++i)
      held_[i].second.copy_(sets_[static_cast<std::size_t>(set)][i]);
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<at::Tensor>> sets_;
  std::vector<std::pair<std::string, at::Tensor>> held_;
  std::shared_ptr<trainer_sdk::WeightSource> source_;
  std::int64_t largest_ = 0;
};

// A worker with its trainer engine, and the weight set it holds now.
struct Replica {
  std::unique_ptr<transport::ChildProcess> process;
  std::shared_ptr<trainer_sdk::ZmqWeightSyncClient> client;
  std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine> engine;
  int http_port = 0;
  int set = 0;
};

Replica start_replica(const fs::path& model, const Config& c, Trainer& trainer,
                      const fs::path& disk_directory, int max_seqs) {
  Replica r;
  r.http_port = transport::pick_free_port();
  r.process = std::make_unique<transport::ChildProcess>(
      bench::worker_binary(),
      std::vector<std::string>{"--model", model.string(), "--control", "tcp://127.0.0.1:*",
                               "--http-port", std::to_string(r.http_port), "--max-num-seqs",
                               std::to_string(max_seqs), "--weight-transfer-config",
                               "{\"backend\": \"" + c.plane + "\"}", "--update-mode", c.mode,
                               "--timeout", "600"});
  const std::string endpoint = worker::wait_until_ready(*r.process, std::chrono::seconds(180));
  r.client =
      std::make_shared<trainer_sdk::ZmqWeightSyncClient>(endpoint, std::chrono::seconds(600));
  r.engine = bench::make_cpu_trainer_engine(
      c.plane, r.client, trainer.source(),
      std::max<std::int64_t>(trainer.largest_tensor_bytes(), 1 << 20), disk_directory,
      std::chrono::seconds(600));
  return r;
}

// One verified round into `target`, with the pause around it when asked; its window.
Window push_round(Replica& target, Trainer& trainer, const std::string& pause,
                  const std::string& version, std::map<std::string, int>& set_of) {
  const int next = 1 - target.set;
  trainer.hold(next);
  set_of[version] = next;
  Window w{Clock::now(), {}};
  if (pause != "none") target.client->call("pause", {{"mode", pause}});
  target.engine->push({version, /*verify=*/true});
  if (pause != "none") target.client->call("resume");
  w.end = Clock::now();
  target.set = next;
  return w;
}

struct Figures {
  std::vector<double> p50[2], p99[2], longest[2], rate[2], round_ms;
  int failed = 0, aborted = 0, refused = 0, checked = 0, wrong = 0, gaps = 0;
};

// Regenerates every check on `checker`, one weight set at a time; counts the wrong labels.
void run_checks(std::vector<Check>& checks, Replica& checker, Trainer& trainer, double tolerance,
                Figures& f) {
  for (int set = 0; set < 2; ++set) {
    if (std::none_of(checks.begin(), checks.end(), [&](const Check& c) { return c.set == set; }))
      continue;
    if (checker.set != set) {
      trainer.hold(set);
      checker.engine->push({"check-" + std::to_string(set), /*verify=*/true});
      checker.set = set;
    }
    httplib::Client http("127.0.0.1", checker.http_port);
    http.set_read_timeout(std::chrono::seconds(600));
    for (const Check& c : checks) {
      if (c.set != set) continue;
      // Teacher forcing (`echo` with `logprobs`): the logprob this weight set gives the stream's
      // own token after the same prefix. No argmax is involved, so two near-equal candidates
      // (bfloat16 rounds batched and single rows differently) cannot flip the verdict.
      std::vector<std::int64_t> prompt = c.stream->prompt;
      prompt.insert(prompt.end(), c.stream->tokens.begin(),
                    c.stream->tokens.begin() + static_cast<std::ptrdiff_t>(c.position) + 1);
      auto res = http.Post("/v1/completions",
                           json({{"prompt", prompt},
                                 {"max_tokens", 1},
                                 {"temperature", 0},
                                 {"echo", true},
                                 {"logprobs", 1}})
                               .dump(),
                           "application/json");
      if (!res || res->status != 200)
        throw std::runtime_error("the idle worker refused a check: " +
                                 (res ? res->body : std::string("no answer")));
      const double forced =
          json::parse(res->body)["choices"][0]["logprobs"]["token_logprobs"][prompt.size() - 1]
              .get<double>();
      const double reported = c.stream->logprobs[c.position];
      const bool same = std::abs(forced - reported) <= tolerance;
      ++f.checked;
      if (same != c.must_match) {
        ++f.wrong;
        std::cerr << "hotswap_serving_updates_bench: token " << c.position << " of a stream ("
                  << c.stream->tokens[c.position] << ", logprob " << reported << ") "
                  << (c.must_match ? "is not" : "is") << " what weight set " << set
                  << " gives it after the same prefix (logprob " << forced
                  << "), against its labels " << c.stream->weight_versions.dump() << "\n";
      }
    }
  }
}

// The checks one phase's streams call for, at most `limit`: boundaries first.
std::vector<Check> checks_for(const std::vector<Stream>& streams,
                              const std::map<std::string, int>& set_of, std::size_t limit,
                              int& wrong) {
  std::vector<Check> boundaries, first_spans;
  for (const Stream& s : streams) {
    if (s.finish_reason != "length" || !s.weight_versions.is_array()) continue;
    const json& spans = s.weight_versions;
    std::size_t covered = 0;
    int previous = -1;
    for (std::size_t k = 0; k < spans.size(); ++k) {
      const auto start = spans[k]["start"].get<std::size_t>(),
                 end = spans[k]["end"].get<std::size_t>();
      const auto found = set_of.find(spans[k]["version"].get<std::string>());
      if (start != covered || end <= start || end > s.tokens.size() || found == set_of.end()) {
        ++wrong;  // spans that do not tile the output, or a version no round set
        std::cerr << "hotswap_serving_updates_bench: spans " << spans.dump()
                  << " do not label a stream of " << s.tokens.size() << " tokens\n";
        break;
      }
      covered = end;
      if (k == 0) {
        first_spans.push_back({&s, end - 1, found->second, true});
      } else if (previous != found->second) {
        boundaries.push_back({&s, start, previous, false});
      }
      previous = found->second;
    }
  }
  std::vector<Check> checks;
  for (auto* list : {&boundaries, &first_spans}) {
    for (const Check& c : *list) {
      if (checks.size() >= limit) break;
      checks.push_back(c);
    }
  }
  return checks;
}

void run_config(const ModelCase& m, const Config& c, const fs::path& work, Trainer& trainer,
                int reps, int rounds, std::size_t check_limit) {
  trainer.hold(0);
  Replica serving = start_replica(work / "set0", c, trainer, work / "disk-serving", 64);
  Replica idle = start_replica(work / "set0", c, trainer, work / "disk-idle", 64);
  std::map<std::string, int> set_of = {{"default", 0}};
  Figures f;
  std::vector<Stream> kept;  // the update phases' streams, for the checks
  const auto quiet = std::chrono::milliseconds(500);
  for (int rep = 0; rep < reps; ++rep) {
    for (int phase = 0; phase < 2; ++phase) {  // 0: into the serving worker; 1: into the idle one
      Replica& target = phase == 0 ? serving : idle;
      ClientPool pool(serving.http_port, c.streams, m.max_tokens, m.config.vocab_size,
                      static_cast<std::uint32_t>(rep * 2 + phase + 1));
      if (!pool.wait_until_streaming(std::chrono::seconds(120)))
        throw std::runtime_error("the clients did not all start streaming within 120 s");
      const auto from = Clock::now();
      std::vector<Window> windows;
      for (int r = 0; r < rounds; ++r) {
        std::this_thread::sleep_for(quiet);
        const std::string version = std::string(phase == 0 ? "update-" : "idle-") +
                                    std::to_string(rep) + "-" + std::to_string(r);
        windows.push_back(push_round(target, trainer, c.pause, version, set_of));
        f.round_ms.push_back(ms_between(windows.back().start, windows.back().end));
      }
      std::this_thread::sleep_for(quiet);
      const auto to = Clock::now();
      if (phase == 0 && !pool.wait_for_streams_in_flight(std::chrono::seconds(300)))
        throw std::runtime_error("the streams in flight did not end within 300 s");
      pool.stop();
      const auto figures = phase_figures(pool.streams(), windows, from, to);
      f.p50[phase].push_back(figures.gap_p50);
      f.p99[phase].push_back(figures.gap_p99);
      f.longest[phase].push_back(figures.gap_max);
      f.rate[phase].push_back(figures.tokens_per_second);
      if (phase == 0) {
        f.gaps += static_cast<int>(figures.gaps);
        f.failed += pool.totals.failed;
        f.aborted += pool.totals.aborted;
        f.refused += pool.totals.refused;
        auto streams = pool.streams();
        kept.insert(kept.end(), std::make_move_iterator(streams.begin()),
                    std::make_move_iterator(streams.end()));
      } else {
        f.failed += pool.totals.failed;  // a failure is a failure in either phase
      }
    }
  }
  int wrong_spans = 0;
  auto checks = checks_for(kept, set_of, check_limit, wrong_spans);
  run_checks(checks, idle, trainer, m.logprob_tolerance, f);
  f.wrong += wrong_spans;

  const std::string what = describe(m, c);
  const json extra = {{"model", m.name},          {"plane", c.plane},     {"update_mode", c.mode},
                      {"pause", c.pause},         {"streams", c.streams}, {"rounds", rounds * reps},
                      {"gaps_in_windows", f.gaps}};
  // Lower is better: a gap pushing into the serving worker over the same gap pushing elsewhere.
  bench::report_against_limit("serving_updates", what + ": in-window gap p50", f.p50[0], f.p50[1],
                              "ms", "ratio_to_contention_alone", false, extra);
  bench::report_against_limit("serving_updates", what + ": in-window gap p99", f.p99[0], f.p99[1],
                              "ms", "ratio_to_contention_alone", false, extra);
  bench::report_against_limit("serving_updates", what + ": longest in-window gap", f.longest[0],
                              f.longest[1], "ms", "ratio_to_contention_alone", false, extra);
  bench::report_against_limit("serving_updates", what + ": tokens/s", f.rate[0], f.rate[1], "tok/s",
                              "ratio_to_contention_alone", false, extra);
  bench::report_spread("serving_updates", what + ": round, pause to resume", f.round_ms, "ms",
                       extra);
  json outcome = extra;
  outcome.update({{"failed", f.failed},
                  {"aborted", f.aborted},
                  {"refused", f.refused},
                  {"labels_checked", f.checked},
                  {"labels_wrong", f.wrong}});
  bench::report("serving_updates", what + ": failed requests", f.failed, "requests", outcome);
  if (!bench::json_only()) {
    std::printf("%-56s aborted %d, refused (503) %d; version labels checked %d, wrong %d\n", "",
                f.aborted, f.refused, f.checked, f.wrong);
  }
  idle.engine->shutdown();
  serving.engine->shutdown();
  idle.process->stop();
  serving.process->stop();
}

template <typename T>
bool has(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

int run(int argc, char** argv) {
  int reps = 3, rounds = 0;  // 0: the model's own
  std::size_t checks = 48;
  std::vector<int> streams, default_streams = {1, 8, 32};
  std::vector<std::string> planes, modes, pauses, sizes;
  const std::vector<std::string> all_planes = {"shm", "gloo", "disk"},
                                 all_modes = {"staged", "inplace"},
                                 all_pauses = {"none", "keep", "wait", "abort"},
                                 all_sizes = {"small", "442MB"};
  const std::string usage =
      "usage: hotswap_serving_updates_bench [--reps N] [--rounds N] [--streams N]... "
      "[--plane shm|gloo|disk]... [--mode staged|inplace]... [--pause none|keep|wait|abort]... "
      "[--size small|442MB]... [--checks N] [--json]";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool value = i + 1 < argc;
    auto pick = [&](const std::vector<std::string>& allowed, std::vector<std::string>& into) {
      if (!value || !has(allowed, std::string(argv[i + 1])))
        throw std::invalid_argument("'" + arg + "' takes one of its listed values (" + usage + ")");
      into.push_back(argv[++i]);
    };
    if (arg == "--reps" && value) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (arg == "--rounds" && value) {
      rounds = std::max(1, std::stoi(argv[++i]));
    } else if (arg == "--checks" && value) {
      checks = static_cast<std::size_t>(std::max(0, std::stoi(argv[++i])));
    } else if (arg == "--streams" && value) {
      streams.push_back(std::clamp(std::stoi(argv[++i]), 1, 64));
    } else if (arg == "--plane") {
      pick(all_planes, planes);
    } else if (arg == "--mode") {
      pick(all_modes, modes);
    } else if (arg == "--pause") {
      pick(all_pauses, pauses);
    } else if (arg == "--size") {
      pick(all_sizes, sizes);
    } else if (arg == "--json") {
      bench::json_only() = true;
    } else {
      throw std::invalid_argument("unknown argument '" + arg + "' (" + usage + ")");
    }
  }
  // The matrix: every plane and mode without a pause at each stream count; the pause modes on
  // shm, staged, at 8 streams (unless chosen).
  std::vector<Config> configs;
  const bool pauses_given = !pauses.empty();
  for (const auto& plane : planes.empty() ? all_planes : planes)
    for (const auto& mode : modes.empty() ? all_modes : modes)
      for (const auto& pause : pauses_given ? pauses : std::vector<std::string>{"none"})
        for (int n : streams.empty() ? default_streams : streams)
          configs.push_back({plane, mode, pause, n});
  if (!pauses_given && planes.empty() && modes.empty() && streams.empty()) {
    for (const auto& pause : {"keep", "wait", "abort"})
      configs.push_back({"shm", "staged", pause, 8});
  }

  const fs::path work =
      fs::temp_directory_path() / ("hotswap-serving-updates-" + std::to_string(::getpid()));
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{work};
  for (const auto& size : sizes.empty() ? all_sizes : sizes) {
    const ModelCase m = size == "small" ? small_model() : bench_llama();
    for (int set = 0; set < 2; ++set) {
      model_loader::SyntheticCheckpointOptions options;
      options.seed = static_cast<std::uint64_t>(set + 1);
      model_loader::write_synthetic_checkpoint(work / ("set" + std::to_string(set)), m.config,
                                               options);
    }
    Trainer trainer(work / "set0", work / "set1");
    for (const Config& c : configs)
      run_config(m, c, work, trainer, reps, rounds > 0 ? rounds : m.rounds, checks);
    fs::remove_all(work / "set0");
    fs::remove_all(work / "set1");
  }
  return 0;
}

}  // namespace

// Errors unwind (stopping the worker processes) before the exit.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "hotswap_serving_updates_bench: " << e.what() << "\n";
    return 1;
  }
}
