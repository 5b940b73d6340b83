// GET /v1/models: vLLM's ModelList, the model served and then each LoRA adapter with its parent,
// its keys in the order vLLM's classes declare them.
#include "protocol/control_methods.hpp"
#include "worker/routes/openai_response.hpp"
#include "worker/routes/route_table.hpp"
#include "worker/routes/serving_context.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::ordered_json;

ordered_json model_list(const ServingContext& context) {
  const std::string& served = context.completions.model_name();
  const auto now = unix_seconds();
  ordered_json permission = {{"id", "modelperm-" + random_hex(32)},
                             {"object", "model_permission"},
                             {"created", now},
                             {"allow_create_engine", false},
                             {"allow_sampling", true},
                             {"allow_logprobs", true},
                             {"allow_search_indices", false},
                             {"allow_view", true},
                             {"allow_fine_tuning", false},
                             {"organization", "*"},
                             {"group", nullptr},
                             {"is_blocking", false}};
  ordered_json card = {{"id", served},
                       {"object", "model"},
                       {"created", now},
                       {"owned_by", "vllm"},
                       {"root", context.model_root},
                       {"parent", nullptr},
                       {"max_model_len", context.config.max_position_embeddings},
                       {"permission", ordered_json::array({permission})}};
  ordered_json data = ordered_json::array({card});
  {
    // vLLM's cards for adapters: their path as root, the base model (or the name
    // --lora-modules gave) as parent, no max_model_len of their own.
    for (const auto& lora : context.loras.list()) {
      data.push_back({{"id", lora.name},
                      {"object", "model"},
                      {"created", now},
                      {"owned_by", "vllm"},
                      {"root", lora.path},
                      {"parent", lora.base_model_name.value_or(served)},
                      {"max_model_len", nullptr},
                      {"permission", ordered_json::array({permission})}});
    }
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace

void add_models_route(RouteTable& table, const ServingContext& context) {
  table.add(protocol::methods::kModels,
            [&context](const RouteCall&) { return RouteAnswer::now(model_list(context)); });
}

}  // namespace hotswap::worker
