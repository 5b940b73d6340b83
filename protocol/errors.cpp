#include "protocol/errors.hpp"

#include <array>

namespace hotswap::protocol {
namespace {

struct KindInfo {
  ErrorKind kind;
  int code;
  std::string_view type;
};

// The one table that maps error kinds to JSON-RPC codes and back.
constexpr std::array<KindInfo, 8> kKinds{{
    {ErrorKind::kParseError, kParseErrorCode, "ParseError"},
    {ErrorKind::kInvalidRequest, kInvalidRequestCode, "InvalidRequest"},
    {ErrorKind::kMethodNotFound, kMethodNotFoundCode, "MethodNotFound"},
    {ErrorKind::kValueError, kInvalidParamsCode, "ValueError"},
    {ErrorKind::kRuntimeError, kWrongStateCode, "RuntimeError"},
    {ErrorKind::kTimeoutError, kTransferFailedCode, "TimeoutError"},
    {ErrorKind::kTransferError, kTransferFailedCode, "TransferError"},
    {ErrorKind::kOverloaded, kOverloadedCode, "OverloadedError"},
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

std::string_view error_type_name(ErrorKind kind) noexcept {
  return info(kind).type;
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
