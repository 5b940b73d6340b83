#include "worker/frontends/http_listener.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "protocol/errors.hpp"
#include "worker/frontends/bounded_thread_pool.hpp"

namespace hotswap::worker {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

// I/O threads: they only move bytes and parse; the handlers run on the pools.
constexpr int kIoThreads = 2;
// Probes (/health, /metrics) get threads of their own.
constexpr std::size_t kProbeThreads = 2, kProbeQueue = 256;
// Descriptors kept for everything else the worker opens (checkpoints, ZeroMQ, collectives).
constexpr std::size_t kReservedDescriptors = 512;
// After a request or a response this large, the allocator hands the free memory of its arenas
// back to the system: the many small allocations such a request leaves behind (a parsed JSON's
// nodes). Large ones are returned as they are freed (worker_main's mmap threshold).
constexpr std::size_t kTrimAfterBytes = 1u << 20;
// A refused request's remaining bytes are read and dropped for at most this long before the
// connection closes, so that the client reads the refusal instead of a reset.
constexpr auto kLingerTime = 1s;

bool is_quiet_close(const beast::error_code& error) {
  return error == http::error::end_of_stream || error == net::error::eof ||
         error == net::error::operation_aborted || error == net::error::connection_reset ||
         error == net::error::broken_pipe || error == net::error::bad_descriptor;
}

// HTTP/1.1's reason phrases as Python's HTTPStatus spells them (vLLM's ErrorInfo.type).
std::string reason_type(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 413:
      return "Request Entity Too Large";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Error";
  }
}

// Raises this process's descriptor limit to its hard limit (thousands of idle connections must
// not run it out) and returns how many connections that leaves room for.
std::size_t connection_capacity() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024 - kReservedDescriptors;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? 1 << 20 : limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const auto descriptors = static_cast<std::size_t>(limit.rlim_cur);
  return descriptors > 2 * kReservedDescriptors ? descriptors - kReservedDescriptors
                                                : descriptors / 2;
}

class Session;

}  // namespace

class HttpListener::Impl {
 public:
  Impl(const Options& options, Handler handler, ProbeTest is_probe)
      : options_(options),
        handler_(std::move(handler)),
        is_probe_(std::move(is_probe)),
        pool_(options.threads, options.max_queued),
        probes_(kProbeThreads, kProbeQueue),
        capacity_(connection_capacity()) {}

  void bind_and_start();
  void stop();
  int port() const { return port_; }

  const Options& options() const { return options_; }
  const HttpLimits& limits() const { return options_.limits; }
  bool stopping() const { return stopping_; }
  HttpResponse handle(HttpRequest& request) const { return handler_(request); }
  BoundedThreadPool& pool_for(const HttpRequest& request) {
    return is_probe_ && is_probe_(request) ? probes_ : pool_;
  }

 private:
  void accept();

  // The io_context is declared first so that it is destroyed last: sessions still queued in it
  // are destroyed with it, and they touch nothing else of this object then.
  net::io_context io_;
  // The acceptor and its back-off timer share a strand: stop() closes the acceptor from another
  // thread while an accept may be completing on an I/O thread.
  net::strand<net::io_context::executor_type> accept_strand_ = net::make_strand(io_);
  tcp::acceptor acceptor_{accept_strand_};
  net::steady_timer backoff_{accept_strand_};
  Options options_;
  Handler handler_;
  ProbeTest is_probe_;
  BoundedThreadPool pool_;
  BoundedThreadPool probes_;
  std::size_t capacity_;
  std::shared_ptr<std::atomic<std::size_t>> open_ = std::make_shared<std::atomic<std::size_t>>(0);
  std::mutex sessions_mutex_;
  std::vector<std::weak_ptr<Session>> sessions_;
  std::vector<std::thread> io_threads_;
  std::atomic<bool> stopping_{false};
  int port_ = -1;
};

namespace {

// One connection: reads a request, has it handled on a pool thread, writes the answer, then
// reads the next. All socket operations run on the connection's strand, except the pieces of a
// streamed body, which its handler thread sends while the strand leaves the socket alone
// (send_now).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpListener::Impl& server,
          std::shared_ptr<std::atomic<std::size_t>> open)
      : stream_(std::move(socket)),
        server_(server),
        open_(std::move(open)),
        fd_(stream_.socket().native_handle()) {
    ++*open_;
  }
  ~Session() { --*open_; }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
  }
  // From any thread: close the connection (the listener is stopping).
  void close_soon() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

 private:
  class StreamSink;

  const HttpLimits& limits() const { return server_.limits(); }

  // A read's deadline is a timer of its own rather than the stream's timeout, which closes the
  // socket when it fires: a request that stalled is told so (408) before the connection ends.
  void start_deadline(std::chrono::milliseconds limit) {
    stream_.expires_never();
    deadline_.expires_after(limit);
    // A timer that expired just as its read finished must not cancel the next operation.
    const std::uint64_t generation = ++deadline_generation_;
    deadline_.async_wait([self = shared_from_this(), generation](beast::error_code e) {
      if (e || generation != self->deadline_generation_) return;  // the read finished first
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }

  void stop_deadline() {
    ++deadline_generation_;
    deadline_.cancel();
  }

  void read_header() {
    if (closed_) return;
    parser_.emplace();
    apply_limits(*parser_, limits());
    // One deadline for the whole header, an idle keep-alive wait included: a client trickling
    // a byte at a time does not move it.
    start_deadline(limits().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code error, std::size_t) {
                              self->on_header(error);
                            });
  }

  void on_header(beast::error_code error) {
    stop_deadline();
    if (error) return fail(error);
    version_ = parser_->get().version();
    if (auto refusal = check_header(*parser_)) return refuse(*refusal);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      // curl waits for this before sending a large body.
      auto go_on =
          std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
      stream_.expires_after(limits().write_timeout);
      http::async_write(stream_, *go_on,
                        [self = shared_from_this(), go_on](beast::error_code e, std::size_t) {
                          if (e) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    start_deadline(limits().body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, std::size_t) {
                       self->on_body(error);
                     });
  }

  void on_body(beast::error_code error) {
    stop_deadline();
    if (error) return fail(error);
    keep_alive_ = parser_->keep_alive();
    HttpRequest request = to_http_request(parser_->release());
    parser_.reset();
    std::weak_ptr<Session> weak = weak_from_this();
    request.peer_gone = [weak] {
      auto self = weak.lock();
      return !self || self->peer_gone();
    };
    BoundedThreadPool& pool = server_.pool_for(request);
    std::function<void()> task = [self = shared_from_this(),
                                  request = std::move(request)]() mutable { self->run(request); };
    if (!pool.try_submit(task)) {
      write(json_error(503,
                       "the worker is overloaded: " + std::to_string(pool.max_queued()) +
                           " HTTP requests are already waiting (--max-queued-requests); retry "
                           "later",
                       "OverloadedError"));
    }
  }

  // On a handler thread.
  void run(HttpRequest& request) {
    HttpResponse response;
    try {
      response = server_.handle(request);
    } catch (const std::exception& e) {
      // A handler answers its own errors; one that escapes is mapped as every error is.
      response =
          json_error(protocol::http_status(e), e.what(), std::string(protocol::error_type_name(e)));
    }
    trim_after_ = request.body.size() + response.body.size() >= kTrimAfterBytes;
    request.body = std::string();
    if (response.stream) return stream(std::move(response));
    net::post(stream_.get_executor(),
              [self = shared_from_this(), response = std::move(response)]() mutable {
                self->write(std::move(response));
              });
  }

  void write(HttpResponse response) {
    if (closed_) return;
    auto message = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), version_);
    message->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers)
      message->set(name, value);
    message->body() = std::move(response.body);
    const bool keep = keep_alive_ && !response.close && !server_.stopping();
    message->keep_alive(keep);
    message->prepare_payload();
    stream_.expires_after(limits().write_timeout);
    http::async_write(stream_, *message,
                      [self = shared_from_this(), message, keep](beast::error_code e, std::size_t) {
                        message->body() = std::string();
                        self->after_response(e, keep);
                      });
  }

  // A response is out (or failed): the next request, or the end of the connection. An end the
  // server chose lingers, so that the client reads the response rather than a reset.
  void after_response(beast::error_code error, bool keep) {
    stream_.expires_never();
    if (std::exchange(trim_after_, false)) ::malloc_trim(0);
    if (error) return close();
    keep ? read_header() : linger();
  }

  // Runs a posted socket operation on the strand and waits for it on this (handler) thread.
  // False when it failed or the connection is closed.
  bool wait_for(std::function<void(std::function<void(beast::error_code)>)> operation) {
    if (closed_ || server_.stopping()) return false;
    auto done = std::make_shared<std::promise<beast::error_code>>();
    auto outcome = done->get_future();
    net::post(stream_.get_executor(), [self = shared_from_this(), operation, done] {
      if (self->closed_) return done->set_value(net::error::operation_aborted);
      self->stream_.expires_after(self->limits().write_timeout);
      operation([done](beast::error_code e) { done->set_value(e); });
    });
    // The write deadline fails the operation itself; this bound only guards against a strand
    // that never runs it.
    if (outcome.wait_for(limits().write_timeout + 5s) != std::future_status::ready) {
      close_soon();
      return false;
    }
    return !outcome.get();
  }

  // Server-sent events and the like: the head, then each piece as a chunk, on this handler
  // thread, each write waited for.
  void stream(HttpResponse response);

  // On the thread that holds a streamed response's sink, while no operation of the strand uses
  // the socket (no read is pending until the stream ends): sends `bytes` itself, non-blocking,
  // polling for room until the write deadline. A piece costs one system call here; through the
  // strand it cost two thread hand-offs (post to an I/O thread, wake this one), which at 64
  // streams on two cores was more than the engine's step. False when the connection failed or
  // was closed, or the deadline passed (the connection is closed then).
  bool send_now(std::string_view bytes) {
    const auto deadline = std::chrono::steady_clock::now() + limits().write_timeout;
    for (;;) {
      const auto sent = send_some(bytes);
      if (sent < 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(sent));
      if (bytes.empty()) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        close_soon();
        return false;
      }
      // Short slices, so that a close from the strand is seen soon.
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 100)));
    }
  }

  // What the socket takes of `bytes` now, without waiting (0 when it is full); -1 when the
  // connection failed or was closed.
  std::int64_t send_some(std::string_view bytes) {
    // close() takes this lock, so the descriptor is never sent to after it closed (and perhaps
    // was reused).
    std::lock_guard lock(socket_mutex_);
    if (closed_ || server_.stopping()) return -1;
    std::int64_t total = 0;
    while (!bytes.empty()) {
      const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(sent));
        total += sent;
        continue;
      }
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      break;
    }
    return total;
  }

  bool peer_gone() const {
    if (closed_ || server_.stopping()) return true;
    // The handler's socket is idle while it runs (no read is pending), so poll can ask it
    // whether the client closed its side.
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  }

  void fail(beast::error_code error) {
    if (std::exchange(timed_out_, false)) {
      // An idle kept-alive connection just ends; a request that started and stalled is told.
      if (!parser_ || !parser_->got_some() || closed_) return close();
      return refuse({408, "the request did not arrive within the worker's deadline (" +
                              std::string(parser_->is_header_done() ? "--http-body-timeout"
                                                                    : "--http-header-timeout") +
                              ")"});
    }
    if (is_quiet_close(error)) return close();
    // The parser's own errors (framing, limits) are the client's to read; others just close.
    if (error.category() == http::make_error_code(http::error::body_limit).category() &&
        error != http::error::partial_message) {
      return refuse(refusal_for(error, limits()));
    }
    close();
  }

  // The framing is no longer known after a refusal: answered, then the connection ends.
  void refuse(const HttpRefusal& refusal) {
    HttpResponse response =
        json_error(refusal.status, refusal.message, reason_type(refusal.status));
    response.close = true;
    write(std::move(response));
  }

  // Half-closes, then drops what the client still sends for a while: closing with unread bytes
  // would reset the connection before the client read the refusal.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    drain();
  }
  void drain() {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code e, std::size_t) {
                              if (e) return self->close();
                              self->drain();
                            });
  }

  void close() {
    std::lock_guard lock(socket_mutex_);  // not while a streamed piece is being sent
    if (closed_.exchange(true)) return;
    stop_deadline();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  HttpListener::Impl& server_;
  std::shared_ptr<std::atomic<std::size_t>> open_;
  const int fd_;
  net::steady_timer deadline_{stream_.get_executor()};
  std::uint64_t deadline_generation_ = 0;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool trim_after_ = false;
  std::atomic<bool> closed_{false};
  std::mutex socket_mutex_;  // close() against send_now()
  std::array<char, 16384> scratch_{};
};

class Session::StreamSink final : public ChunkSink {
 public:
  explicit StreamSink(Session& session) : session_(session) {}
  using ChunkSink::write;
  bool write(const std::vector<std::string>& pieces) override {
    if (failed_) return false;
    frame(pieces);
    failed_ = !pending_.empty() && !session_.send_now(pending_);
    pending_.clear();
    return !failed_;
  }
  bool offer(const std::vector<std::string>& pieces) override {
    if (failed_) return false;
    frame(pieces);
    const auto sent = session_.send_some(pending_);
    failed_ = sent < 0;
    if (!failed_) pending_.erase(0, static_cast<std::size_t>(sent));
    return !failed_;
  }
  bool backlogged() const override { return !pending_.empty(); }
  // What an offer left, then the last chunk (no trailers).
  bool finish() { return write(std::vector<std::string>{}) && session_.send_now("0\r\n\r\n"); }
  bool peer_gone() const override { return failed_ || session_.peer_gone(); }

 private:
  // Each piece framed as a chunk of the chunked encoding (its size in hex, CRLF, the bytes,
  // CRLF), after whatever is still to be sent.
  void frame(const std::vector<std::string>& pieces) {
    for (const auto& piece : pieces) {
      if (piece.empty()) continue;  // an empty chunk would end the body
      char size[24];
      const int n = std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
      pending_.append(size, static_cast<std::size_t>(n)).append(piece).append("\r\n");
    }
  }

  Session& session_;
  std::string pending_;  // framed bytes an offer could not send yet
  bool failed_ = false;
};

void Session::stream(HttpResponse response) {
  auto head = std::make_shared<http::response<http::empty_body>>(
      static_cast<http::status>(response.status), version_);
  head->set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers)
    head->set(name, value);
  head->chunked(true);
  const bool keep = keep_alive_ && !response.close;
  head->keep_alive(keep);
  auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*head);
  StreamSink sink(*this);
  bool ok = wait_for([this, head, serializer](std::function<void(beast::error_code)> done) {
    http::async_write_header(
        stream_, *serializer,
        [head, serializer, done](beast::error_code e, std::size_t) { done(e); });
  });
  if (ok) {
    try {
      response.stream(sink);
    } catch (const std::exception&) {
      ok = false;  // the head is sent: all that can be said is that the stream ended early
    }
  }
  ok = ok && sink.finish();
  net::post(stream_.get_executor(), [self = shared_from_this(), ok, keep] {
    self->after_response(ok ? beast::error_code{} : net::error::operation_aborted, keep);
  });
}

}  // namespace

void HttpListener::Impl::bind_and_start() {
  beast::error_code error;
  tcp::resolver resolver(io_);
  const auto results =
      resolver.resolve(options_.host, std::to_string(options_.port), tcp::resolver::passive, error);
  if (error || results.empty()) {
    throw protocol::RuntimeError("cannot bind the HTTP routes to " + options_.host + ":" +
                                 std::to_string(options_.port) + ": " +
                                 (error ? error.message() : "no such address"));
  }
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), error);
  if (!error) acceptor_.set_option(net::socket_base::reuse_address(true), error);
  if (!error) acceptor_.bind(endpoint, error);
  if (!error) acceptor_.listen(net::socket_base::max_listen_connections, error);
  if (error) {
    throw protocol::RuntimeError("cannot bind the HTTP routes to " + options_.host + ":" +
                                 std::to_string(options_.port) + ": " + error.message());
  }
  port_ = acceptor_.local_endpoint().port();
  accept();
  for (int i = 0; i < kIoThreads; ++i)
    io_threads_.emplace_back([this] { io_.run(); });
}

void HttpListener::Impl::accept() {
  acceptor_.async_accept(
      net::make_strand(io_), [this](beast::error_code error, tcp::socket socket) {
        if (stopping_ || error == net::error::operation_aborted) return;
        if (error) {
          // Out of descriptors, say: wait for some to close rather than spin on the error.
          backoff_.expires_after(100ms);
          backoff_.async_wait([this](beast::error_code e) {
            if (!e && !stopping_) accept();
          });
          return;
        }
        if (open_->load() >= capacity_) {
          beast::error_code ignored;
          socket.close(ignored);  // past what the descriptor limit leaves room for
        } else {
          // A stream writes one small chunk per token: with Nagle's algorithm on, a chunk
          // written while the one before is unacknowledged waits for the client's ACK, which
          // Linux may delay by 40 ms, and then paces the stream whatever the engine does.
          beast::error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);
          auto session = std::make_shared<Session>(std::move(socket), *this, open_);
          {
            std::lock_guard lock(sessions_mutex_);
            if (sessions_.size() >= 64 && sessions_.size() > 2 * open_->load()) {
              std::erase_if(sessions_, [](const auto& s) { return s.expired(); });
            }
            sessions_.push_back(session);
          }
          session->start();
        }
        accept();
      });
}

void HttpListener::Impl::stop() {
  if (stopping_.exchange(true)) return;
  net::post(accept_strand_, [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    backoff_.cancel();
  });
  {
    std::lock_guard lock(sessions_mutex_);
    for (const auto& weak : sessions_) {
      if (auto session = weak.lock()) session->close_soon();
    }
  }
  // Handlers still running see their caller gone and their writes fail: they return.
  pool_.stop();
  probes_.stop();
  io_.stop();
  for (auto& t : io_threads_)
    t.join();
}

HttpListener::HttpListener(const Options& options, Handler handler, ProbeTest is_probe)
    : impl_(std::make_shared<Impl>(options, std::move(handler), std::move(is_probe))) {
  impl_->bind_and_start();
}

HttpListener::~HttpListener() {
  impl_->stop();
}

int HttpListener::port() const {
  return impl_->port();
}

}  // namespace hotswap::worker
