// RouteTable: the worker's routes by method name, one per row of protocol/control_methods.cpp,
// and the one place a call's params become what its handler takes. A route registered with a
// parser gets its params parsed once into their typed form (the parser validates them, as the
// table's validator does for clients); any other route gets them after the table's validator.
// Either way the params are refused before any work, so a weight-transfer call with bad params
// is answered without being counted (WeightSession::run).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "worker/routes/route.hpp"

namespace hotswap::worker {

class RouteTable {
 public:
  using Handler = std::function<RouteAnswer(const RouteCall& call)>;
  // A call whose params were checked: runs the route's work.
  using Prepared = std::function<RouteAnswer()>;

  // A route whose handler reads the params as they came, after the table's validator.
  void add(std::string_view method, Handler handler);

  // A route whose params `parse` turns into `Params` (throwing ValueError naming the field, as
  // the table's validator would), handed to `serve` with the call.
  template <class Params>
  void add(std::string_view method, std::function<Params(const RouteCall&)> parse,
           std::function<RouteAnswer(Params, const RouteCall&)> serve) {
    insert(method, [parse = std::move(parse), serve = std::move(serve)](const RouteCall& call) {
      return Prepared([params = parse(call), &call, serve]() mutable {
        return serve(std::move(params), call);
      });
    });
  }

  // Checks `call`'s params for `method` and returns its work, to run now or under the weight
  // session's lock. MethodNotFound for a method the worker does not have; ValueError for bad
  // params. The returned work refers to `call`, which must outlive it.
  Prepared prepare(std::string_view method, const RouteCall& call) const;

  // Throws std::logic_error unless every method of protocol::control_methods() has a route and
  // every route a method: a route added to one only is a defect found at start-up.
  void check_complete() const;

 private:
  using Preparer = std::function<Prepared(const RouteCall& call)>;
  void insert(std::string_view method, Preparer preparer);
  std::map<std::string, Preparer, std::less<>> routes_;
};

}  // namespace hotswap::worker
