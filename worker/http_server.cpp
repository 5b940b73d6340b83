#include "worker/http_server.hpp"

#include <httplib.h>

#include <sstream>

#include "protocol/errors.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::json;

// vLLM's status for an error of each kind: bad input 400, wrong state 409, anything that
// failed on the way (a transfer, a timeout, the engine) 500.
int http_status(const std::exception& e) {
  if (const auto* typed = dynamic_cast<const protocol::Error*>(&e)) {
    switch (typed->kind()) {
      case protocol::ErrorKind::kParseError:
      case protocol::ErrorKind::kInvalidRequest:
      case protocol::ErrorKind::kValueError:
        return 400;
      case protocol::ErrorKind::kMethodNotFound:
        return 404;
      case protocol::ErrorKind::kRuntimeError:
        return 409;
      default:
        return 500;
    }
  }
  return 500;
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message,
                 const std::string& type, const std::string& param = "") {
  json error = {{"message", message}, {"type", type}};
  if (!param.empty()) error["param"] = param;
  // FastAPI puts an HTTPException's text in `detail`; vLLM's error responses use `error`.
  reply(res, status, {{"error", error}, {"detail", message}});
}

// The JSON body of a POST: {} when empty; a 400 (as vLLM's routes answer) when it is not a
// JSON object.
std::optional<json> body_of(const httplib::Request& req, httplib::Response& res) {
  if (req.body.empty()) return json::object();
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    reply_error(res, 400, "Invalid JSON format", "ValueError");
    return std::nullopt;
  }
  if (!body.is_object()) {
    reply_error(res, 400, "Request body must be a JSON object", "ValueError");
    return std::nullopt;
  }
  return body;
}

}  // namespace

HttpServer::HttpServer(WorkerService& service, const std::string& host, int port)
    : service_(service), server_(std::make_unique<httplib::Server>()) {
  auto call = [this](const std::string& method, const json& params, httplib::Response& res) {
    try {
      reply(res, 200, service_.call(method, params));
    } catch (const std::exception& e) {
      const auto* typed = dynamic_cast<const protocol::Error*>(&e);
      reply_error(res, http_status(e), e.what(),
                  typed ? std::string(protocol::error_type_name(typed->kind())) : "RuntimeError");
    }
  };
  // POST routes whose JSON body is the method's params.
  for (const char* method :
       {"init_weight_transfer_engine", "shutdown_weight_transfer_engine", "start_weight_update",
        "start_draft_weight_update", "update_weights", "finish_weight_update",
        "update_weight_version", "weight_checker", "generate", "resume"}) {
    server_->Post(std::string("/") + method,
                  [call, method](const httplib::Request& req, httplib::Response& res) {
                    if (auto body = body_of(req, res)) call(method, *body, res);
                  });
  }
  for (const char* method : {"weight_info", "is_paused", "health"}) {
    server_->Get(std::string("/") + method,
                 [call, method](const httplib::Request&, httplib::Response& res) {
                   call(method, json::object(), res);
                 });
  }
  server_->Get("/get_world_size", [call](const httplib::Request& req, httplib::Response& res) {
    json params = json::object();
    if (req.has_param("include_dp"))
      params["include_dp"] = req.get_param_value("include_dp") != "false";
    call("get_world_size", params, res);
  });
  server_->Post("/pause", [call](const httplib::Request& req, httplib::Response& res) {
    json params = json::object();
    std::string mode = req.has_param("mode") ? req.get_param_value("mode") : "abort";
    if (mode != "abort" && mode != "wait" && mode != "keep") {
      reply_error(res, 400, "Invalid pause mode '" + mode + "': expected abort, wait or keep",
                  "ValueError", "query.mode");
      return;
    }
    params["mode"] = mode;
    if (req.has_param("clear_cache"))
      params["clear_cache"] = req.get_param_value("clear_cache") != "false";
    call("pause", params, res);
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(service_), "text/plain; version=0.0.4");
  });

  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
  } else {
    port_ = server_->bind_to_port(host, port) ? port : -1;
  }
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

std::string render_metrics(const WorkerService& service) {
  std::ostringstream out;
  auto stats = service.operation_stats();
  out << "# HELP vllm:rl_weight_update_operations_total Weight-update operations by outcome.\n"
         "# TYPE vllm:rl_weight_update_operations_total counter\n";
  for (const auto& [op, s] : stats) {
    out << "vllm:rl_weight_update_operations_total{operation=\"" << op << "\",status=\"success\"} "
        << s.success << "\n";
    out << "vllm:rl_weight_update_operations_total{operation=\"" << op << "\",status=\"error\"} "
        << s.error << "\n";
  }
  out << "# HELP vllm:rl_weight_update_operations_in_flight Weight-update operations running.\n"
         "# TYPE vllm:rl_weight_update_operations_in_flight gauge\n";
  for (const auto& [op, s] : stats) {
    out << "vllm:rl_weight_update_operations_in_flight{operation=\"" << op << "\"} " << s.in_flight
        << "\n";
  }
  out << "# HELP vllm:rl_weight_update_operation_duration_seconds Time spent per operation.\n"
         "# TYPE vllm:rl_weight_update_operation_duration_seconds summary\n";
  for (const auto& [op, s] : stats) {
    out << "vllm:rl_weight_update_operation_duration_seconds_sum{operation=\"" << op << "\"} "
        << s.seconds << "\n";
    out << "vllm:rl_weight_update_operation_duration_seconds_count{operation=\"" << op << "\"} "
        << s.success + s.error << "\n";
  }
  out << "# HELP hotswap_weight_bytes_received_total Bytes of weights received.\n"
         "# TYPE hotswap_weight_bytes_received_total counter\n"
      << "hotswap_weight_bytes_received_total " << service.bytes_received() << "\n";
  auto version = service.weight_version();
  out << "# HELP hotswap_weight_version_info The weight version being served.\n"
         "# TYPE hotswap_weight_version_info gauge\n"
      << "hotswap_weight_version_info{version=\"" << (version ? *version : "") << "\"} 1\n";
  return out.str();
}

}  // namespace hotswap::worker
