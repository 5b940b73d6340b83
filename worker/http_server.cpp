#include "worker/http_server.hpp"

#include <cctype>
#include <map>
#include <optional>
#include <sstream>

#include "protocol/bounded_json.hpp"
#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"
#include "worker/completion_service.hpp"
#include "worker/http_listener.hpp"
#include "worker/log_line.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::json;

HttpResponse json_response(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  // Invalid UTF-8 quoted in a message is replaced, never a failed reply.
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

HttpResponse openai_error_response(const std::exception& e) {
  auto error = openai_error(e);
  return json_response(error.status, error.body);
}

// FastAPI's answers for a path no route has, and a route asked with another method.
HttpResponse not_found() {
  return json_response(404, {{"detail", "Not Found"}});
}
HttpResponse method_not_allowed(const std::string& allow) {
  HttpResponse response = json_response(405, {{"detail", "Method Not Allowed"}});
  response.headers.emplace_back("Allow", allow);
  return response;
}

// The media type of a Content-Type header: lower-cased, parameters dropped.
std::string media_type(const HttpRequest& request) {
  std::string type = request.header("content-type").value_or("");
  type = type.substr(0, type.find(';'));
  std::string out;
  for (char c : type) {
    if (c != ' ' && c != '\t')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// The JSON body of a POST: {} when empty; a 400 (as vLLM's routes answer) when it is not a
// JSON object or nests too deep.
std::optional<json> body_of(const HttpRequest& req, HttpResponse& res) {
  if (req.body.empty()) return json::object();
  auto parsed = protocol::parse_bounded_json(req.body);
  if (parsed.refusal == protocol::JsonRefusal::kTooDeep) {
    res = json_error(400, "Invalid JSON format: the body " + parsed.reason, "ValueError");
    return std::nullopt;
  }
  if (!parsed.ok()) {
    res = json_error(400, "Invalid JSON format", "ValueError");
    return std::nullopt;
  }
  json body = std::move(parsed.value);
  if (!body.is_object()) {
    res = json_error(400, "Request body must be a JSON object", "ValueError");
    return std::nullopt;
  }
  return body;
}

// The JSON body of an OpenAI-compatible route, refused in vLLM's error object.
std::optional<json> openai_body_of(const HttpRequest& req, HttpResponse& res) {
  if (req.body.empty()) return json::object();
  auto parsed = protocol::parse_bounded_json(req.body);
  if (!parsed.ok() || !parsed.value.is_object()) {
    res = openai_error_response(protocol::ValueError(parsed.ok()
                                                         ? "the request body must be a JSON object"
                                                         : "the request body " + parsed.reason));
    return std::nullopt;
  }
  return std::move(parsed.value);
}

// Server-sent events: one `data: <chunk>` per chunk as the run produces it, then
// `data: [DONE]`. A client that hangs up cancels the run.
void stream_completion(HttpResponse& res, std::shared_ptr<CompletionRun> run) {
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = [run](ChunkSink& sink) {
    for (;;) {
      bool finished = false;
      for (const auto& chunk : run->take(std::chrono::milliseconds(100), finished)) {
        if (!sink.write("data: " + chunk + "\n\n")) return run->cancel();
      }
      if (finished) {
        if (!sink.write("data: [DONE]\n\n")) run->cancel();
        return;
      }
      if (sink.peer_gone()) return run->cancel();  // the client went away mid-stream
    }
  };
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
bool read_query(const protocol::ControlMethod& method, const HttpRequest& req, HttpResponse& res,
                json& params) {
  for (std::string_view field : method.query_fields) {
    const std::string key(field);
    const auto text = req.query_value(key);
    if (!text) continue;
    try {
      method.validate(json{{key, *text}});
      params[key] = *text;
      continue;
    } catch (const protocol::ValueError& as_text) {
      if (auto flag = query_bool(*text)) {
        try {
          method.validate(json{{key, *flag}});
          params[key] = *flag;
          continue;
        } catch (const protocol::ValueError&) {
        }
      }
      const std::string message = as_text.what();
      res = json_response(
          400,
          {{"error", {{"message", message}, {"type", "ValueError"}, {"param", "query." + key}}},
           {"detail", message}});
      return false;
    }
  }
  return true;
}

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

bool unguarded(const std::string& path) {
  return path == "/health" || path == "/metrics";
}

}  // namespace

// The route table: a path's handler per method.
struct HttpServer::Routes {
  using Route = std::function<HttpResponse(HttpRequest&)>;
  std::map<std::string, std::map<std::string, Route>> by_path;
};

HttpServer::HttpServer(WorkerService& service, const WorkerOptions& options)
    : service_(service), routes_(std::make_unique<Routes>()) {
  const std::string& host = options.http_host;
  const int port = options.http_port;
  if (!is_loopback_host(host) && options.api_key.empty()) {
    LogLine{} << "hotswap-worker: warning: the HTTP routes on " << host << ":" << port
              << " are reachable beyond this host without an API key; anyone who can connect "
                 "can replace or read the weights (see --api-key)\n";
  }
  auto call = [this](const std::string& method, const json& params,
                     const std::function<bool()>& caller_gone = {}) {
    try {
      return json_response(200, service_.call(method, params, caller_gone));
    } catch (const std::exception& e) {
      const auto* typed = dynamic_cast<const protocol::Error*>(&e);
      return json_error(
          protocol::http_status(e), e.what(),
          typed ? std::string(protocol::error_type_name(typed->kind())) : "RuntimeError");
    }
  };
  // vLLM's OpenAI-compatible routes: their errors in OpenAI's error object, and completions
  // answered whole or streamed.
  auto openai = [this](const protocol::ControlMethod* m) {
    return [this, m](HttpRequest& req) {
      HttpResponse res;
      if (m->http_verb == protocol::HttpVerb::kPost && media_type(req) != "application/json") {
        // vLLM's validate_json_request, answered as its RequestValidationError handler does.
        const std::string message =
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed";
        return json_response(
            400,
            {{"error",
              {{"message", message}, {"type", "Bad Request"}, {"param", nullptr}, {"code", 400}}}});
      }
      auto body = openai_body_of(req, res);
      if (!body) return res;
      try {
        if (m->name == protocol::methods::kModels) {  // in vLLM's key order
          res.body = service_.models().dump();
          return res;
        }
        if (m->name != protocol::methods::kCompletions) {
          return json_response(
              200, service_.call(std::string(m->name), *body, [&req] { return req.peer_gone(); }));
        }
        // vLLM names a completion after the X-Request-Id header, over the body's request_id.
        if (auto id = req.header("x-request-id")) (*body)["request_id"] = *id;
        auto run = service_.start_completion(*body, [&req] { return req.peer_gone(); });
        if (run->streaming()) {
          stream_completion(res, std::move(run));
          return res;
        }
        return json_response(200, run->wait([&req] { return req.peer_gone(); }));
      } catch (const std::exception& e) {
        return openai_error_response(e);
      }
    };
  };
  // Every route of the control-method table; its params come from the JSON body or the query.
  for (const auto& method : protocol::control_methods()) {
    if (method.http_verb == protocol::HttpVerb::kNone) continue;
    const protocol::ControlMethod* m = &method;  // the table lives as long as the process
    const std::string verb = m->http_verb == protocol::HttpVerb::kGet ? "GET" : "POST";
    auto& slot = routes_->by_path[std::string(m->http_route)][verb];
    if (m->openai) {
      slot = openai(m);
      continue;
    }
    slot = [call, m](HttpRequest& req) {
      HttpResponse res;
      // A POST's body is JSON or nothing. hotswap's guard, beyond vLLM's (which checks only its
      // OpenAI routes): a web page's form or text/plain POST cannot reach these routes.
      const std::string type = media_type(req);
      if (m->http_verb == protocol::HttpVerb::kPost &&
          !(type == "application/json" || (type.empty() && req.body.empty()))) {
        return json_error(415,
                          "Unsupported Media Type: Only 'application/json' is allowed (got '" +
                              req.header("content-type").value_or("") + "')",
                          "UnsupportedMediaType");
      }
      if (m->takes_json_body) {
        auto body = body_of(req, res);
        if (!body) return res;
        if (!read_query(*m, req, res, *body)) return res;
        std::function<bool()> caller_gone;
        if (m->cancelled_when_caller_leaves) caller_gone = [&req] { return req.peer_gone(); };
        return call(std::string(m->name), *body, caller_gone);
      }
      json params = json::object();
      if (!read_query(*m, req, res, params)) return res;
      return call(std::string(m->name), params);
    };
  }
  routes_->by_path["/metrics"]["GET"] = [this](HttpRequest&) {
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4";
    res.body = render_metrics(service_) + service_.serving_metrics();
    return res;
  };

  const std::string api_key = options.api_key;
  HttpListener::Options listen;
  listen.host = host;
  listen.port = port;
  listen.threads = options.http_threads;
  listen.max_queued = options.max_queued_requests;
  listen.limits.max_body_bytes = options.max_request_bytes;
  auto ms = [](double seconds) {
    return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
  };
  listen.limits.header_timeout = ms(options.http_header_timeout_seconds);
  listen.limits.body_timeout = ms(options.http_body_timeout_seconds);
  listener_ = std::make_unique<HttpListener>(
      listen,
      [this, api_key](HttpRequest& req) -> HttpResponse {
        // vLLM's --api-key: every route but the health check and the metrics.
        if (!api_key.empty() && !unguarded(req.path)) {
          const std::string header = req.header("authorization").value_or("");
          const std::string scheme = "Bearer ";
          if (!header.starts_with(scheme) || !same_secret(header.substr(scheme.size()), api_key)) {
            return json_response(401, {{"error", "Unauthorized"}});
          }
        }
        auto path = routes_->by_path.find(req.path);
        if (path == routes_->by_path.end()) return not_found();
        auto route = path->second.find(req.method);
        if (route == path->second.end()) {
          std::string allow;
          for (const auto& [verb, handler] : path->second)
            allow += (allow.empty() ? "" : ", ") + verb;
          return method_not_allowed(allow);
        }
        return route->second(req);
      },
      [](const HttpRequest& req) { return req.method == "GET" && unguarded(req.path); });
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const {
  return listener_->port();
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
