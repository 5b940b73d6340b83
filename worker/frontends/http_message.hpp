// HttpRequest and HttpResponse: what the worker's HTTP routes read and write, apart from the
// server that frames them on the wire (http_listener.hpp), so that routes are plain functions of
// a request and the parser can be tested and fuzzed on bytes alone (http_request_reader.hpp).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hotswap::worker {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // path and query, as sent
  std::string path;    // the target's path, percent-decoded
  // The query's fields, percent-decoded ('+' is a space), in order; a repeated key keeps every
  // value.
  std::vector<std::pair<std::string, std::string>> query;
  // Header names lower-cased; a repeated header keeps every value.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Whether the client has hung up on this request: a long generate whose caller left stops
  // costing a batch slot. Always false where nobody can tell (a request parsed from bytes).
  std::function<bool()> peer_gone = [] { return false; };

  // The first value of a header (name in any case), when sent.
  std::optional<std::string> header(std::string_view name) const;
  // The first value of a query field, when sent.
  std::optional<std::string> query_value(std::string_view key) const;
};

// Writes the pieces of a streamed body, each as a chunk of its own. A write blocks until its
// pieces are on their way (or the connection's write deadline passed) and is false once the
// client is gone: the producer stops. Several pieces written together leave in one system call,
// still one chunk each (a server-sent event per chunk, as clients that read chunk by chunk
// expect). One thread at a time uses a sink; it need not be the handler's (see offer).
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual bool write(const std::vector<std::string>& pieces) = 0;
  bool write(std::string piece) { return write(std::vector<std::string>{std::move(piece)}); }
  // Without waiting: sends what the socket takes of the framed pieces now and keeps the rest,
  // which the next write sends first (backlogged() until then). False once the client is gone.
  // For a producer that must not block (the scheduler's thread) and hands the sink back to the
  // handler when a piece did not all leave.
  virtual bool offer(const std::vector<std::string>& pieces) = 0;
  virtual bool backlogged() const = 0;
  virtual bool peer_gone() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type and framing
  std::string body;
  // A streamed body (server-sent events): called on a handler thread once the head is sent,
  // with a sink for its pieces; the body is done when it returns. `body` is ignored then.
  std::function<void(ChunkSink&)> stream;
  // Close the connection after this response (an error that leaves the framing unknown).
  bool close = false;
};

// The JSON error body that the HTTP layer and the weight-sync routes answer with: vLLM's
// `error` object and FastAPI's `detail`.
HttpResponse json_error(int status, const std::string& message, const std::string& type);

}  // namespace hotswap::worker
