// The serving routes: generate, vLLM's OpenAI-compatible routes and its tokenizer routes, each a
// folder of worker/routes/ with its request handling and its serving code, added to the worker's
// route table here.
#pragma once

#include "worker/routes/route_table.hpp"
#include "worker/routes/serving_context.hpp"

namespace hotswap::worker {

// Adds every serving route; `context` must outlive `table`.
void add_serving_routes(RouteTable& table, const ServingContext& context);

}  // namespace hotswap::worker
