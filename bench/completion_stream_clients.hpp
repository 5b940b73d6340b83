// The clients of the serving-through-updates bench: N threads, each streaming one greedy
// /v1/completions after another (asking for token ids, logprobs and weight versions) until
// stopped, recording when each token's event arrived.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotswap::bench {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// One completed or cut stream, as its client saw it.
struct Stream {
  std::vector<std::int64_t> prompt, tokens;
  std::vector<double> logprobs;
  std::vector<Clock::time_point> arrivals;  // of each token's event
  std::string finish_reason;                // "" when the bench cut it at the phase's end
  json weight_versions;                     // the last chunk's spans
};

struct ClientTotals {
  std::atomic<int> failed{0}, refused{0}, aborted{0};
};

// Splits server-sent events out of the bytes as they arrive and records each token's arrival.
class EventReader {
 public:
  explicit EventReader(Stream& stream) : stream_(stream) {}
  void feed(std::string_view bytes) {
    pending_.append(bytes);
    for (std::size_t end; (end = pending_.find("\n\n")) != std::string::npos;) {
      const std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (!event.starts_with("data: ") || event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6));
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& choice = chunk["choices"][0];
      if (choice.contains("token_ids") && choice["token_ids"].is_array()) {
        const auto now = Clock::now();
        const json lp = choice.contains("logprobs") && choice["logprobs"].is_object()
                            ? choice["logprobs"].value("token_logprobs", json::array())
                            : json::array();
        for (std::size_t i = 0; i < choice["token_ids"].size(); ++i) {
          stream_.tokens.push_back(choice["token_ids"][i].get<std::int64_t>());
          stream_.logprobs.push_back(i < lp.size() && lp[i].is_number() ? lp[i].get<double>()
                                                                        : NAN);
          stream_.arrivals.push_back(now);
        }
      }
      if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
        stream_.finish_reason = choice["finish_reason"].get<std::string>();
        stream_.weight_versions = choice.value("weight_versions", json());
      }
    }
  }

 private:
  Stream& stream_;
  std::string pending_;
};

// N clients, each asking for one stream after another until stopped; what they saw.
class ClientPool {
 public:
  ClientPool(int port, int clients, int max_tokens, std::int64_t vocab, std::uint32_t seed)
      : port_(port),
        max_tokens_(max_tokens),
        vocab_(vocab),
        completed_(std::make_unique<std::atomic<int>[]>(static_cast<std::size_t>(clients))) {
    for (int i = 0; i < clients; ++i)
      threads_.emplace_back([this, i, seed] { client(i, seed * 1000 + static_cast<unsigned>(i)); });
  }
  ~ClientPool() { stop(); }

  // Until every client has seen two tokens of a stream (false if `timeout` passed first).
  bool wait_until_streaming(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (streaming_.load() >= static_cast<int>(threads_.size())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Until the stream each client has in flight now has ended (false if `timeout` passed first):
  // the streams that spanned the rounds end whole, so that their labels can be checked.
  bool wait_for_streams_in_flight(std::chrono::seconds timeout) {
    std::vector<int> now;
    for (std::size_t i = 0; i < threads_.size(); ++i)
      now.push_back(completed_[i].load());
    const auto deadline = Clock::now() + timeout;
    for (std::size_t i = 0; i < threads_.size(); ++i) {
      while (completed_[i].load() == now[i]) {
        if (Clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    return true;
  }

  // Cuts every stream in flight and joins the clients.
  void stop() {
    stopping_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  std::vector<Stream> streams() {
    std::lock_guard lock(mutex_);
    return streams_;
  }
  ClientTotals totals;

 private:
  void client(int index, std::uint32_t seed) {
    std::mt19937 random(seed);
    bool counted = false;
    httplib::Client http("127.0.0.1", port_);
    http.set_read_timeout(std::chrono::seconds(600));
    while (!stopping_) {
      Stream s;
      const int length = 16 + static_cast<int>(random() % 17);
      for (int k = 0; k < length; ++k)
        s.prompt.push_back(static_cast<std::int64_t>(random() % static_cast<unsigned>(vocab_)));
      const json body = {{"prompt", s.prompt},
                         {"max_tokens", max_tokens_},
                         {"ignore_eos", true},
                         {"temperature", 0},
                         {"logprobs", 1},
                         {"stream", true},
                         {"return_token_ids", true},
                         {"return_weight_versions", true}};
      EventReader reader(s);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = body.dump();
      req.set_header("Content-Type", "application/json");
      int status = 0;
      req.response_handler = [&](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      bool bad_event = false;
      req.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
        try {
          if (status == 200) reader.feed(std::string_view(data, size));
        } catch (const std::exception& e) {  // an event that is not JSON: this stream failed
          std::cerr << "hotswap_serving_updates_bench: a stream sent a bad event: " << e.what()
                    << "\n";
          bad_event = true;
          return false;
        }
        if (!counted && s.tokens.size() >= 2) {
          counted = true;
          ++streaming_;
        }
        return !stopping_.load();
      };
      httplib::Response res;
      httplib::Error error = httplib::Error::Success;
      const bool ok = http.send(req, res, error);
      if (stopping_) {
        s.finish_reason.clear();  // cut by the bench: its gaps count, its labels are not checked
      } else if (!ok || res.status != 200) {
        if (res.status == 503) {
          ++totals.refused;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        } else {
          ++totals.failed;
          std::cerr << "hotswap_serving_updates_bench: a stream failed: HTTP " << res.status << " ("
                    << httplib::to_string(error) << ") " << res.body.substr(0, 300) << "\n";
        }
        continue;
      } else if (s.finish_reason == "abort") {
        ++totals.aborted;
      }
      std::lock_guard lock(mutex_);
      streams_.push_back(std::move(s));
      ++completed_[static_cast<std::size_t>(index)];
    }
  }

  int port_, max_tokens_;
  std::int64_t vocab_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> streaming_{0};
  std::unique_ptr<std::atomic<int>[]> completed_;  // streams each client has ended
  std::mutex mutex_;
  std::vector<Stream> streams_;
  std::vector<std::thread> threads_;
};

}  // namespace hotswap::bench
