#include "protocol/weight_transfer_config.hpp"

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {

WeightTransferConfig WeightTransferConfig::from_json(const nlohmann::json& object) {
  JsonFields fields(object, "WeightTransferConfig", {"backend"});
  WeightTransferConfig config;
  if (auto backend = fields.optional_string("backend")) config.backend = *backend;
  fields.finish();
  if (config.backend.empty()) throw ValueError("WeightTransferConfig: `backend` must not be empty");
  return config;
}

nlohmann::json WeightTransferConfig::to_json() const {
  return {{"backend", backend}};
}

}  // namespace hotswap::protocol
