#include "worker/routes/route_table.hpp"

#include <stdexcept>

#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"

namespace hotswap::worker {

void RouteTable::add(std::string_view method, Handler handler) {
  const std::string name(method);
  insert(method, [name, handler = std::move(handler)](const RouteCall& call) {
    protocol::validate_params(name, call.params);
    return Prepared([&call, &handler] { return handler(call); });
  });
}

void RouteTable::insert(std::string_view method, Preparer preparer) {
  if (protocol::find_control_method(method) == nullptr) {
    throw std::logic_error("route '" + std::string(method) +
                           "' is not a method of protocol/control_methods.cpp");
  }
  if (!routes_.emplace(std::string(method), std::move(preparer)).second) {
    throw std::logic_error("route '" + std::string(method) + "' is added twice");
  }
}

RouteTable::Prepared RouteTable::prepare(std::string_view method, const RouteCall& call) const {
  const auto& row = protocol::control_method(method);  // MethodNotFound
  auto route = routes_.find(row.name);
  if (route == routes_.end()) {
    throw protocol::MethodNotFound("Method not found: '" + std::string(method) + "'");
  }
  if (!call.params.is_object()) throw protocol::ValueError("the params must be a JSON object");
  return route->second(call);
}

void RouteTable::check_complete() const {
  for (const auto& method : protocol::control_methods()) {
    if (!routes_.contains(method.name)) {
      throw std::logic_error("control method '" + std::string(method.name) + "' has no route");
    }
  }
}

}  // namespace hotswap::worker
