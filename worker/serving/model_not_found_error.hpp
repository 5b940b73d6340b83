// ModelNotFoundError: a request for a model (or LoRA adapter) the worker does not serve, vLLM's
// 404 NotFoundError; a ValueError over ZeroMQ.
#pragma once

#include "protocol/errors.hpp"

namespace hotswap::worker {

class ModelNotFoundError : public protocol::ValueError {
 public:
  using protocol::ValueError::ValueError;
};

}  // namespace hotswap::worker
