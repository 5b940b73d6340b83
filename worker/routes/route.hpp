// What a route sees of a call and what it answers, whichever front end the call came through
// (the ZeroMQ socket or HTTP). Every method of protocol/control_methods.cpp is a route of the
// worker's RouteTable; the front ends turn a request into a RouteCall, ask the table, and turn
// the RouteAnswer into their reply by the method's row alone, never by its name.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotswap::worker {

// One call of a route.
struct RouteCall {
  explicit RouteCall(const nlohmann::json& body) : params(body) {}

  const nlohmann::json& params;  // vLLM's request body, an object
  // The same params with their keys in the order the client wrote them, for a method that keeps
  // it (ControlMethod::keeps_key_order) and a call that carries a conversation; else null.
  const nlohmann::ordered_json* ordered = nullptr;
  // Asked now and then by long work: true once the caller went away (cancels it). May be empty.
  std::function<bool()> caller_gone;
  // The front end can send server-sent events (HTTP); over ZeroMQ `stream: true` is refused.
  bool may_stream = false;
  // The request's id given beside the body (HTTP's X-Request-Id), which names it over the body's
  // `request_id`, as vLLM's server does.
  std::optional<std::string> request_id;
};

// An answer that comes later: the run of a generation, held by the scheduler's callbacks until
// it ends. Whatever waits for it holds no scheduler lock.
class PendingAnswer {
 public:
  virtual ~PendingAnswer() = default;
  // `done` runs once the answer is ready (at once if it is), on the thread that made it ready;
  // it may call response() but nothing of the scheduler.
  virtual void when_done(std::function<void()> done) = 0;
  // The answer, or the error that ended the run; only once it is ready.
  virtual nlohmann::ordered_json response() const = 0;
  // Waits for the answer (the worker's timeout bounds every run), asking `caller_gone` now and
  // then: true cancels the run.
  virtual nlohmann::ordered_json wait(const std::function<bool()>& caller_gone);
  // The caller went away: the run ends early (finish_reason "abort").
  virtual void cancel() = 0;
  // Whether response() is a few fields, cheap enough to build on the thread that ended the run
  // (the scheduler's), rather than queued for a thread of the caller's (a completion's response
  // decodes every logprob token).
  virtual bool quick_response() const { return false; }
};

// A run answered as server-sent events (a completion with `stream: true`), each a JSON text.
class StreamedAnswer {
 public:
  virtual ~StreamedAnswer() = default;
  // Waits up to `wait` for events; `finished` once the last is among those returned. Returning,
  // the thread that took owns the connection until hand_back().
  virtual std::vector<std::string> take(std::chrono::milliseconds wait, bool& finished) = 0;
  // Between two take()s, the run's own thread may send an event with `offer` (true when it all
  // left) instead of waking the taker; attach(nullptr) before the connection goes.
  virtual void attach(std::function<bool(const std::string& event)> offer) = 0;
  virtual void hand_back() = 0;
  virtual void cancel() = 0;
};

// What a route answers: a body now, or a run whose answer comes later, or a stream of events.
// Exactly one is set (`body` counts as set when neither run is). A body is JSON, or JSON whose
// keys keep the order vLLM's classes declare them in (an OpenAI-compatible route's).
struct RouteAnswer {
  using Body = std::variant<nlohmann::json, nlohmann::ordered_json>;
  Body body;
  std::shared_ptr<PendingAnswer> pending;
  std::shared_ptr<StreamedAnswer> stream;

  static RouteAnswer now(Body body) { return {std::move(body), {}, {}}; }
  // The body as JSON, whichever order its keys keep (ZeroMQ's result, WorkerService::call).
  nlohmann::json json_body() const {
    return std::visit([](const auto& b) { return nlohmann::json(b); }, body);
  }
  static RouteAnswer later(std::shared_ptr<PendingAnswer> run) { return {{}, std::move(run), {}}; }
  static RouteAnswer streamed(std::shared_ptr<StreamedAnswer> run) {
    return {{}, {}, std::move(run)};
  }
};

}  // namespace hotswap::worker
