#include "worker/http_server.hpp"

#include <httplib.h>

#include <sys/socket.h>

#include <cctype>
#include <optional>
#include <sstream>
#include "worker/log_line.hpp"

#include "protocol/bounded_json.hpp"
#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"
#include "worker/bounded_thread_pool.hpp"
#include "worker/completion_service.hpp"
#include "worker/peer_hangup.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::json;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  // Invalid UTF-8 quoted in an error message is replaced, never a failed reply.
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message,
                 const std::string& type, const std::string& param = "") {
  json error = {{"message", message}, {"type", type}};
  if (!param.empty()) error["param"] = param;
  // FastAPI puts an HTTPException's text in `detail`; vLLM's error responses use `error`.
  reply(res, status, {{"error", error}, {"detail", message}});
}

// The JSON body of a POST: {} when empty; a 400 (as vLLM's routes answer) when it is not a
// JSON object or nests too deep. (cpp-httplib has refused an oversized body with a 413.)
std::optional<json> body_of(const httplib::Request& req, httplib::Response& res) {
  if (req.body.empty()) return json::object();
  auto parsed = protocol::parse_bounded_json(req.body);
  if (parsed.refusal == protocol::JsonRefusal::kTooDeep) {
    reply_error(res, 400, "Invalid JSON format: the body " + parsed.reason, "ValueError");
    return std::nullopt;
  }
  if (!parsed.ok()) {
    reply_error(res, 400, "Invalid JSON format", "ValueError");
    return std::nullopt;
  }
  json body = std::move(parsed.value);
  if (!body.is_object()) {
    reply_error(res, 400, "Request body must be a JSON object", "ValueError");
    return std::nullopt;
  }
  return body;
}

void reply_openai_error(httplib::Response& res, const std::exception& e) {
  auto error = openai_error(e);
  res.status = error.status;
  res.set_content(error.body.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

// The JSON body of an OpenAI-compatible route, refused in vLLM's error object.
std::optional<json> openai_body_of(const httplib::Request& req, httplib::Response& res) {
  if (req.body.empty()) return json::object();
  auto parsed = protocol::parse_bounded_json(req.body);
  if (!parsed.ok() || !parsed.value.is_object()) {
    reply_openai_error(
        res,
        protocol::ValueError(parsed.ok() ? "the request body must be a JSON object"
                                         : "the request body is not valid JSON: " + parsed.reason));
    return std::nullopt;
  }
  return std::move(parsed.value);
}

// Server-sent events: one `data: <chunk>` per chunk as the run produces it, then
// `data: [DONE]`. A client that hangs up cancels the run.
void stream_completion(httplib::Response& res, std::shared_ptr<CompletionRun> run,
                       std::shared_ptr<PeerHangup> peer) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [run, peer](std::size_t, httplib::DataSink& sink) {
        bool finished = false;
        for (const auto& chunk : run->take(std::chrono::milliseconds(100), finished)) {
          const std::string event = "data: " + chunk + "\n\n";
          if (!sink.write(event.data(), event.size())) return false;
        }
        if (finished) {
          static constexpr std::string_view kDone = "data: [DONE]\n\n";
          if (!sink.write(kDone.data(), kDone.size())) return false;
          sink.done();
        } else if (!sink.is_writable() || peer->hung_up()) {
          // A socket that only waits looks writable after a hang-up: ask the peer itself.
          return false;
        }
        return true;
      },
      [run](bool success) {
        if (!success) run->cancel();  // the client went away mid-stream
      });
}

// A query-string value as FastAPI reads a bool parameter, if it reads as one.
std::optional<bool> query_bool(const std::string& text) {
  std::string lower;
  for (char c : text)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

// Adds the query fields of `method` to `params`, each checked on its own so that a bad one is
// answered with a 400 naming it (`param: "query.mode"`), as vLLM's query validation does. A
// value is the string itself where the method takes a string there, else the boolean it spells.
bool read_query(const protocol::ControlMethod& method, const httplib::Request& req,
                httplib::Response& res, json& params) {
  for (std::string_view field : method.query_fields) {
    const std::string key(field);
    if (!req.has_param(key)) continue;
    const std::string text = req.get_param_value(key);
    try {
      method.validate(json{{key, text}});
      params[key] = text;
      continue;
    } catch (const protocol::ValueError& as_text) {
      if (auto flag = query_bool(text)) {
        try {
          method.validate(json{{key, *flag}});
          params[key] = *flag;
          continue;
        } catch (const protocol::ValueError&) {
        }
      }
      reply_error(res, 400, as_text.what(), "ValueError", "query." + key);
      return false;
    }
  }
  return true;
}

// Set on a connection's thread while it is answered only to be turned away (the queue is full).
thread_local bool t_turned_away = false;

// cpp-httplib's pool with a bound: `threads` serve connections, at most `max_queued` wait. A
// connection past that is answered at once, on the accepting thread, with a 503.
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(std::size_t threads, std::size_t max_queued) : pool_(threads, max_queued) {}

  void enqueue(std::function<void()> task) override {
    if (pool_.try_submit(task)) return;
    // The task owns the connection's socket and closes it: run it, to answer 503 and close.
    t_turned_away = true;
    task();
    t_turned_away = false;
  }
  void shutdown() override { pool_.stop(); }

 private:
  BoundedThreadPool pool_;
};

bool is_loopback_host(const std::string& host) {
  return host.starts_with("127.") || host == "localhost" || host == "::1";
}

// Compares without an early exit, so that the time taken says nothing about the key.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  return diff == 0;
}

}  // namespace

HttpServer::HttpServer(WorkerService& service, const WorkerOptions& options)
    : service_(service), server_(std::make_unique<httplib::Server>()) {
  const std::string& host = options.http_host;
  const int port = options.http_port;
  const std::string api_key = options.api_key;
  if (!is_loopback_host(host) && api_key.empty()) {
    LogLine{} << "hotswap-worker: warning: the HTTP routes on " << host << ":" << port
              << " are reachable beyond this host without an API key; anyone who can connect "
                 "can replace or read the weights (see --api-key)\n";
  }
  const std::size_t threads = options.http_threads, max_queued = options.max_queued_requests;
  server_->new_task_queue = [threads, max_queued] {
    return new BoundedTaskQueue(threads, max_queued);
  };
  server_->set_payload_max_length(options.max_request_bytes);
  server_->set_pre_routing_handler([api_key, max_queued](const httplib::Request& req,
                                                         httplib::Response& res) {
    if (t_turned_away) {
      res.set_header("Connection", "close");
      reply_error(res, 503,
                  "the worker is overloaded: " + std::to_string(max_queued) +
                      " HTTP connections are already waiting (--max-queued-requests); retry later",
                  "OverloadedError");
      return httplib::Server::HandlerResponse::Handled;
    }
    // vLLM's --api-key: every route but the health check and the metrics.
    if (!api_key.empty() && req.path != "/health" && req.path != "/metrics") {
      const std::string header = req.get_header_value("Authorization");
      const std::string scheme = "Bearer ";
      if (!header.starts_with(scheme) || !same_secret(header.substr(scheme.size()), api_key)) {
        res.status = 401;
        res.set_content(json{{"error", "Unauthorized"}}.dump(), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  auto call = [this](const std::string& method, const json& params, httplib::Response& res,
                     const std::function<bool()>& caller_gone = {}) {
    try {
      reply(res, 200, service_.call(method, params, caller_gone));
    } catch (const std::exception& e) {
      const auto* typed = dynamic_cast<const protocol::Error*>(&e);
      reply_error(res, protocol::http_status(e), e.what(),
                  typed ? std::string(protocol::error_type_name(typed->kind())) : "RuntimeError");
    }
  };
  // vLLM's OpenAI-compatible routes: their errors in OpenAI's error object, and completions
  // answered whole or streamed.
  auto openai = [this](const protocol::ControlMethod* m) {
    return [this, m](const httplib::Request& req, httplib::Response& res) {
      auto body = openai_body_of(req, res);
      if (!body) return;
      try {
        if (m->name == protocol::methods::kModels) {  // in vLLM's key order
          res.set_content(service_.models().dump(), "application/json");
          return;
        }
        if (m->name != protocol::methods::kCompletions) {
          reply(res, 200, service_.call(std::string(m->name), *body));
          return;
        }
        // vLLM names a completion after the X-Request-Id header, over the body's request_id.
        if (req.has_header("X-Request-Id"))
          (*body)["request_id"] = req.get_header_value("X-Request-Id");
        auto run = service_.start_completion(*body);
        auto peer = std::make_shared<PeerHangup>(req.local_addr, req.local_port, req.remote_addr,
                                                 req.remote_port);
        if (run->streaming()) {
          stream_completion(res, std::move(run), std::move(peer));
          return;
        }
        const auto response = run->wait([peer] { return peer->hung_up(); });
        res.status = 200;
        res.set_content(response.dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
      } catch (const std::exception& e) {
        reply_openai_error(res, e);
      }
    };
  };
  // Every route of the control-method table; its params come from the JSON body or the query.
  for (const auto& method : protocol::control_methods()) {
    if (method.http_verb == protocol::HttpVerb::kNone) continue;
    const protocol::ControlMethod* m = &method;  // the table lives as long as the process
    if (m->openai) {
      const std::string route(m->http_route);
      m->http_verb == protocol::HttpVerb::kGet ? (void)server_->Get(route, openai(m))
                                               : (void)server_->Post(route, openai(m));
      continue;
    }
    auto handler = [call, m](const httplib::Request& req, httplib::Response& res) {
      json params = json::object();
      if (m->takes_json_body) {
        auto body = body_of(req, res);
        if (!body) return;
        params = std::move(*body);
      }
      if (!read_query(*m, req, res, params)) return;
      std::function<bool()> caller_gone;
      if (m->cancelled_when_caller_leaves) {  // a generate whose client hangs up frees its slot
        auto peer = std::make_shared<PeerHangup>(req.local_addr, req.local_port, req.remote_addr,
                                                 req.remote_port);
        caller_gone = [peer] { return peer->hung_up(); };
      }
      call(std::string(m->name), params, res, caller_gone);
    };
    const std::string route(method.http_route);
    if (method.http_verb == protocol::HttpVerb::kGet) {
      server_->Get(route, handler);
    } else {
      server_->Post(route, handler);
    }
  }
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(service_) + service_.serving_metrics(),
                    "text/plain; version=0.0.4");
  });

  // cpp-httplib listens with a backlog of 5: 64 clients connecting at once overflow it, and a
  // dropped handshake can stall a request past the server's 5 s read timeout. The listening
  // socket is remembered here and given the system's backlog once bound.
  auto listening = std::make_shared<int>(-1);
  server_->set_socket_options([listening](int sock) {
    httplib::default_socket_options(sock);
    *listening = sock;
  });
  port_ = server_->bind_to_port(host, port) ? port : -1;
  if (port_ >= 0 && *listening >= 0) ::listen(*listening, SOMAXCONN);
  if (port_ < 0) {
    throw protocol::RuntimeError("cannot bind the HTTP routes to " + host + ":" +
                                 std::to_string(port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

HttpServer::~HttpServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// A bucket bound as Prometheus' Python client writes it (Python's repr: 1 is "1.0").
std::string le_label(double bound) {
  std::ostringstream out;
  out << bound;
  std::string text = out.str();
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

std::string render_metrics(const WorkerService& service) {
  std::ostringstream out;
  auto stats = service.operation_stats();
  auto label = [](const std::string& key, const std::string& value) {
    return key + "=\"" + escape_label_value(value) + "\"";
  };
  // One sample a line: `name{labels} value`.
  auto sample = [&](const std::string& name, const std::string& labels, auto value) {
    out << name;
    if (!labels.empty()) out << '{' << labels << '}';
    out << ' ' << value << '\n';
  };
  // vLLM 0.34's two series; its counter of outcomes went, and lives on under hotswap's name.
  out << "# HELP vllm:rl_weight_update_operations_in_flight Weight-transfer operations currently "
         "awaited.\n"
         "# TYPE vllm:rl_weight_update_operations_in_flight gauge\n";
  for (const auto& [op, s] : stats)
    sample("vllm:rl_weight_update_operations_in_flight", label("operation", op), s.in_flight);
  out << "# HELP vllm:rl_weight_update_operation_duration_seconds Duration of one weight-transfer "
         "operation.\n"
         "# TYPE vllm:rl_weight_update_operation_duration_seconds histogram\n";
  for (const auto& [op, s] : stats) {
    const std::string name = "vllm:rl_weight_update_operation_duration_seconds";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < WorkerService::kDurationBuckets.size(); ++i) {
      cumulative += s.within[i];
      sample(
          name + "_bucket",
          label("operation", op) + "," + label("le", le_label(WorkerService::kDurationBuckets[i])),
          cumulative);
    }
    sample(name + "_bucket", label("operation", op) + ",le=\"+Inf\"", s.success + s.error);
    sample(name + "_sum", label("operation", op), s.seconds);
    sample(name + "_count", label("operation", op), s.success + s.error);
  }
  out << "# HELP hotswap_weight_update_operations_total Weight-update operations by outcome.\n"
         "# TYPE hotswap_weight_update_operations_total counter\n";
  for (const auto& [op, s] : stats) {
    sample("hotswap_weight_update_operations_total", label("operation", op) + ",status=\"success\"",
           s.success);
    sample("hotswap_weight_update_operations_total", label("operation", op) + ",status=\"error\"",
           s.error);
  }
  // Every rank receives the whole broadcast (vLLM's rank semantics), so a tp = N worker's total
  // is about N times what its trainer sent; the per-rank family says which rank lags.
  const auto by_rank = service.bytes_received_by_rank();
  std::uint64_t total = 0;
  for (std::uint64_t b : by_rank)
    total += b;
  out << "# HELP hotswap_weight_bytes_received_total Bytes of weights received, by all ranks.\n"
         "# TYPE hotswap_weight_bytes_received_total counter\n";
  sample("hotswap_weight_bytes_received_total", "", total);
  if (by_rank.size() > 1) {
    out << "# HELP hotswap_tensor_parallel_rank_weight_bytes_received_total Bytes of weights "
           "received by each tensor-parallel rank.\n"
           "# TYPE hotswap_tensor_parallel_rank_weight_bytes_received_total counter\n";
    for (std::size_t r = 0; r < by_rank.size(); ++r) {
      sample("hotswap_tensor_parallel_rank_weight_bytes_received_total",
             label("tp_rank", std::to_string(r)), by_rank[r]);
    }
  }
  auto version = service.weight_version();
  out << "# HELP hotswap_weight_version_info The weight version being served.\n"
         "# TYPE hotswap_weight_version_info gauge\n";
  sample("hotswap_weight_version_info", label("version", version ? *version : ""), 1);
  return out.str();
}

}  // namespace hotswap::worker
