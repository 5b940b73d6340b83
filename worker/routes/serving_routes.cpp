#include "worker/routes/serving_routes.hpp"

namespace hotswap::worker {

// Each defined in its route's folder; a new route is its folder, its row in
// protocol/control_methods.cpp and one line in each list here.
void add_generate_route(RouteTable& table, const ServingContext& context);
void add_completions_route(RouteTable& table, const ServingContext& context);
void add_chat_completions_route(RouteTable& table, const ServingContext& context);
void add_models_route(RouteTable& table, const ServingContext& context);
void add_tokenize_routes(RouteTable& table, const ServingContext& context);

void add_serving_routes(RouteTable& table, const ServingContext& context) {
  add_generate_route(table, context);
  add_completions_route(table, context);
  add_chat_completions_route(table, context);
  add_models_route(table, context);
  add_tokenize_routes(table, context);
}

}  // namespace hotswap::worker
