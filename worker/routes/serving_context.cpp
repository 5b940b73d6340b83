#include "worker/routes/serving_context.hpp"

#include "protocol/errors.hpp"

namespace hotswap::worker {

const model_loader::Tokenizer& ServingContext::require_tokenizer() const {
  if (tokenizer == nullptr) throw protocol::RuntimeError(no_tokenizer);
  return *tokenizer;
}

}  // namespace hotswap::worker
