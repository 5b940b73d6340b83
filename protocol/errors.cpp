#include "protocol/errors.hpp"

#include <array>

namespace hotswap::protocol {
namespace {

struct KindInfo {
  ErrorKind kind;
  int code;
  std::string_view type;
  int http_status;
  std::string_view openai_param = {};  // the request field an OpenAI error object names
};

// The one table that maps error kinds to JSON-RPC codes, HTTP statuses, and back. vLLM 0.34
// answers bad input with 400, an unknown route 404, and an engine's RuntimeError (wrong state or
// order included) with 500; a worker that asks to be retried later (overloaded, generation
// paused) with 503, and a model it does not serve with 404.
constexpr std::array<KindInfo, 9> kKinds{{
    {ErrorKind::kParseError, kParseErrorCode, "ParseError", 400},
    {ErrorKind::kInvalidRequest, kInvalidRequestCode, "InvalidRequest", 400},
    {ErrorKind::kMethodNotFound, kMethodNotFoundCode, "MethodNotFound", 404},
    {ErrorKind::kValueError, kInvalidParamsCode, "ValueError", 400},
    {ErrorKind::kRuntimeError, kWrongStateCode, "RuntimeError", 500},
    {ErrorKind::kTimeoutError, kTransferFailedCode, "TimeoutError", 500},
    {ErrorKind::kTransferError, kTransferFailedCode, "TransferError", 500},
    {ErrorKind::kOverloaded, kOverloadedCode, "OverloadedError", 503},
    // After kValueError: a client reading the reply's type back gets a ValueError.
    {ErrorKind::kModelNotFound, kInvalidParamsCode, "ValueError", 404, "model"},
}};

const KindInfo& info(ErrorKind kind) noexcept {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return k;
  }
  return kKinds[4];  // unreachable for a valid enum value
}

}  // namespace

int error_code(ErrorKind kind) noexcept {
  return info(kind).code;
}

int http_status(ErrorKind kind) noexcept {
  return info(kind).http_status;
}

int http_status(const std::exception& e) noexcept {
  const auto* typed = dynamic_cast<const Error*>(&e);
  return typed ? http_status(typed->kind()) : 500;
}

std::string_view error_type_name(ErrorKind kind) noexcept {
  return info(kind).type;
}

std::string_view error_type_name(const std::exception& e) noexcept {
  const auto* typed = dynamic_cast<const Error*>(&e);
  return error_type_name(typed ? typed->kind() : ErrorKind::kRuntimeError);
}

std::string_view openai_error_type(int http_status) noexcept {
  switch (http_status) {
    case 400:
      return "BadRequestError";
    case 404:
      return "NotFoundError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return "InternalServerError";
  }
}

std::string_view openai_error_param(const std::exception& e) noexcept {
  const auto* typed = dynamic_cast<const Error*>(&e);
  return typed ? info(typed->kind()).openai_param : std::string_view();
}

ErrorKind error_kind_from_reply(int code, std::string_view type) noexcept {
  for (const auto& k : kKinds) {
    if (k.type == type) return k.kind;
  }
  for (const auto& k : kKinds) {
    if (k.code == code) return k.kind;
  }
  return ErrorKind::kRuntimeError;
}

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::kParseError:
      throw ParseError(message);
    case ErrorKind::kInvalidRequest:
      throw InvalidRequest(message);
    case ErrorKind::kMethodNotFound:
      throw MethodNotFound(message);
    case ErrorKind::kValueError:
      throw ValueError(message);
    case ErrorKind::kModelNotFound:
      throw ModelNotFoundError(message);
    case ErrorKind::kTimeoutError:
      throw TimeoutError(message);
    case ErrorKind::kTransferError:
      throw TransferError(message);
    case ErrorKind::kOverloaded:
      throw OverloadedError(message);
    case ErrorKind::kRuntimeError:
      break;
  }
  throw RuntimeError(message);
}

}  // namespace hotswap::protocol
