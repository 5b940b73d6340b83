// The error hierarchy both sides share. It mirrors vLLM's Python exceptions so that a message
// read in a hotswap log means what it would in vLLM's: ValueError for bad input, RuntimeError
// for a call in the wrong state or order, TimeoutError for a wait that ran out, TransferError
// for a data plane that failed. JSON-RPC framing errors have their own kinds. Each kind maps to
// exactly one JSON-RPC error code, in errors.cpp and nowhere else.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace hotswap::protocol {

enum class ErrorKind {
  kParseError,      // the request is not valid JSON
  kInvalidRequest,  // valid JSON but not a JSON-RPC 2.0 request
  kMethodNotFound,  // no such method
  kValueError,      // bad parameters (vLLM's ValueError)
  kRuntimeError,    // wrong state or order (vLLM's RuntimeError)
  kTimeoutError,    // a blocking wait ran past its timeout
  kTransferError,   // the data plane failed mid-way
  kOverloaded,      // try again later (HTTP 503): the queue is full, or generation is paused
  // A model or LoRA adapter the worker does not serve: a ValueError to JSON-RPC clients (its
  // code and data.type), vLLM's 404 NotFoundError over HTTP.
  kModelNotFound,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

#define HOTSWAP_DEFINE_ERROR(Name, Kind)                                \
  class Name : public Error {                                           \
   public:                                                              \
    explicit Name(const std::string& message) : Error(Kind, message) {} \
  };
HOTSWAP_DEFINE_ERROR(ParseError, ErrorKind::kParseError)
HOTSWAP_DEFINE_ERROR(InvalidRequest, ErrorKind::kInvalidRequest)
HOTSWAP_DEFINE_ERROR(MethodNotFound, ErrorKind::kMethodNotFound)
HOTSWAP_DEFINE_ERROR(RuntimeError, ErrorKind::kRuntimeError)
HOTSWAP_DEFINE_ERROR(TimeoutError, ErrorKind::kTimeoutError)
HOTSWAP_DEFINE_ERROR(TransferError, ErrorKind::kTransferError)
HOTSWAP_DEFINE_ERROR(OverloadedError, ErrorKind::kOverloaded)
#undef HOTSWAP_DEFINE_ERROR

class ValueError : public Error {
 public:
  explicit ValueError(const std::string& message) : Error(ErrorKind::kValueError, message) {}

 protected:
  ValueError(ErrorKind kind, const std::string& message) : Error(kind, message) {}
};
// Caught as a ValueError, answered as its kind says (HTTP 404).
class ModelNotFoundError : public ValueError {
 public:
  explicit ModelNotFoundError(const std::string& message)
      : ValueError(ErrorKind::kModelNotFound, message) {}
};

// JSON-RPC 2.0 error codes, as pinned in docs/architecture.md.
inline constexpr int kParseErrorCode = -32700;
inline constexpr int kInvalidRequestCode = -32600;
inline constexpr int kMethodNotFoundCode = -32601;
inline constexpr int kInvalidParamsCode = -32602;
inline constexpr int kWrongStateCode = -32000;
inline constexpr int kTransferFailedCode = -32001;
// hotswap's extension of the pinned codes: too many requests are already waiting.
inline constexpr int kOverloadedCode = -32002;

// The JSON-RPC code for an error kind.
int error_code(ErrorKind kind) noexcept;

// The HTTP status of an error of `kind`, on every route (vLLM 0.34's): 400, 404, 500 or 503.
int http_status(ErrorKind kind) noexcept;
// The same for any exception: 500 for one of no known kind.
int http_status(const std::exception& e) noexcept;

// The name carried in `error.data.type`: "ValueError", "RuntimeError", ...
std::string_view error_type_name(ErrorKind kind) noexcept;
// The same for any exception: "RuntimeError" for one of no known kind (as make_error reports it).
std::string_view error_type_name(const std::exception& e) noexcept;

// The `error.type` of vLLM's OpenAI-compatible routes for an HTTP status: "BadRequestError"
// (400), "NotFoundError" (404), "ServiceUnavailableError" (503), else "InternalServerError".
std::string_view openai_error_type(int http_status) noexcept;
// The `error.param` of vLLM's OpenAI-compatible routes for an error: the request field it names
// ("model" for a model not served), or empty for none.
std::string_view openai_error_param(const std::exception& e) noexcept;

// The inverse, for clients: the kind a reply's (code, data.type) stands for. An unknown
// type falls back on the code; an unknown code is a RuntimeError.
ErrorKind error_kind_from_reply(int code, std::string_view type) noexcept;

// Throws the typed exception for `kind` with `message`: how a client re-raises a worker's error.
[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace hotswap::protocol
