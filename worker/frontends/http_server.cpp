#include "worker/frontends/http_server.hpp"

#include <cctype>
#include <map>
#include <optional>
#include <sstream>
#include <variant>

#include "protocol/bounded_json.hpp"
#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"
#include "protocol/timeouts.hpp"
#include "worker/frontends/http_listener.hpp"
#include "worker/log_line.hpp"
#include "worker/routes/openai_response.hpp"
#include "worker/serving/serving_metrics.hpp"

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
void stream_events(HttpResponse& res, std::shared_ptr<StreamedAnswer> run) {
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = [run](ChunkSink& sink) {
    // Between two writes of this thread, the scheduler's thread sends each token's event
    // itself, without waiting (StreamedAnswer::attach); the sink is detached before it goes.
    run->attach([&sink](const std::string& chunk) {
      try {
        return sink.offer({"data: " + chunk + "\n\n"}) && !sink.backlogged();
      } catch (const std::exception&) {
        return false;  // this thread's write then says what went wrong
      }
    });
    struct Detach {
      StreamedAnswer& run;
      ~Detach() { run.attach(nullptr); }
    } detach{*run};
    std::vector<std::string> events;
    for (;;) {
      bool finished = false;
      // Whatever the run produced since the last write goes out in one write: when this thread
      // was slower than the engine's steps (64 streams on two cores), the events it missed
      // cost one system call, not one each. A write first sends what an offer left.
      events.clear();
      for (const auto& chunk : run->take(std::chrono::milliseconds(100), finished))
        events.push_back("data: " + chunk + "\n\n");
      if (finished) events.emplace_back("data: [DONE]\n\n");
      if (!sink.write(events)) return run->cancel();
      if (finished) return;
      if (sink.peer_gone()) return run->cancel();  // the client went away mid-stream
      run->hand_back();
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

// A probe's route (control_methods.hpp): no API key, and the probes' own pool.
bool is_probe_route(const std::string& path) {
  for (const auto& m : protocol::control_methods()) {
    if (m.probe && m.http_route == path) return true;
  }
  return false;
}

// A route's answer as its body: the result's "text" where the route answers another media type
// (/metrics), else the JSON (an OpenAI-compatible route's in vLLM's key order).
template <class Json>
HttpResponse body_response(const protocol::ControlMethod& m, const Json& body) {
  HttpResponse res;
  res.status = 200;
  if (!m.http_content_type.empty()) {
    res.content_type = std::string(m.http_content_type);
    res.body = body.at("text").template get<std::string>();
    return res;
  }
  // Invalid UTF-8 quoted in a message is replaced, never a failed reply.
  res.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return res;
}

// One request of the route of `m`: its params from the JSON body and the query, its answer from
// the service's route table, whole or streamed as server-sent events.
HttpResponse answer_route(WorkerService& service, const protocol::ControlMethod& m,
                          HttpRequest& req) {
  HttpResponse res;
  if (m.http_verb == protocol::HttpVerb::kPost) {
    const std::string type = media_type(req);
    if (m.openai && type != "application/json") {
      // vLLM's validate_json_request, answered as its RequestValidationError handler does.
      const std::string message =
          "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed";
      return json_response(
          400,
          {{"error",
            {{"message", message}, {"type", "Bad Request"}, {"param", nullptr}, {"code", 400}}}});
    }
    // A POST's body is JSON or nothing. hotswap's guard, beyond vLLM's (which checks only its
    // OpenAI routes): a web page's form or text/plain POST cannot reach these routes.
    if (!m.openai && !(type == "application/json" || (type.empty() && req.body.empty()))) {
      return json_error(415,
                        "Unsupported Media Type: Only 'application/json' is allowed (got '" +
                            req.header("content-type").value_or("") + "')",
                        "UnsupportedMediaType");
    }
  }
  json params = json::object();
  if (m.takes_json_body) {
    auto body = m.openai ? openai_body_of(req, res) : body_of(req, res);
    if (!body) return res;
    params = std::move(*body);
  }
  if (!read_query(m, req, res, params)) return res;
  std::function<bool()> caller_gone;
  if (m.openai || m.cancelled_when_caller_leaves) caller_gone = [&req] { return req.peer_gone(); };
  try {
    // A conversation's body again, its keys in the order the client wrote them (it parsed
    // within the bounds above).
    std::optional<nlohmann::ordered_json> ordered;
    if (protocol::carries_conversation(m, params))
      ordered = nlohmann::ordered_json::parse(req.body);
    RouteCall call(params);
    call.ordered = ordered ? &*ordered : nullptr;
    call.caller_gone = caller_gone;
    call.may_stream = true;
    call.request_id = req.header("x-request-id");
    RouteAnswer answered = service.answer(m.name, call);
    if (answered.stream) {
      stream_events(res, std::move(answered.stream));
      return res;
    }
    if (answered.pending) return body_response(m, answered.pending->wait(caller_gone));
    return std::visit([&m](const auto& body) { return body_response(m, body); }, answered.body);
  } catch (const std::exception& e) {
    if (m.openai) return openai_error_response(e);
    return json_error(protocol::http_status(e), e.what(),
                      std::string(protocol::error_type_name(e)));
  }
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
  // Every route of the control-method table, answered from the service's route table; the
  // method's row alone says how (OpenAI's error object, a text body, a stream), never its name.
  for (const auto& method : protocol::control_methods()) {
    if (method.http_verb == protocol::HttpVerb::kNone) continue;
    const protocol::ControlMethod* m = &method;  // the table lives as long as the process
    const std::string verb = m->http_verb == protocol::HttpVerb::kGet ? "GET" : "POST";
    routes_->by_path[std::string(m->http_route)][verb] = [this, m](HttpRequest& req) {
      return answer_route(service_, *m, req);
    };
  }

  const std::string api_key = options.api_key;
  HttpListener::Options listen;
  listen.host = host;
  listen.port = port;
  listen.threads = options.http_threads;
  listen.max_queued = options.max_queued_requests;
  listen.limits.max_body_bytes = options.max_request_bytes;
  listen.limits.header_timeout = protocol::to_milliseconds(options.http_header_timeout_seconds);
  listen.limits.body_timeout = protocol::to_milliseconds(options.http_body_timeout_seconds);
  listener_ = std::make_unique<HttpListener>(
      listen,
      [this, api_key](HttpRequest& req) -> HttpResponse {
        // vLLM's --api-key: every route but the probes (the health check and the metrics).
        if (!api_key.empty() && !is_probe_route(req.path)) {
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
      [](const HttpRequest& req) { return req.method == "GET" && is_probe_route(req.path); });
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const {
  return listener_->port();
}

}  // namespace hotswap::worker
