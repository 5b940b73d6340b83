#include "worker/frontends/http_listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "worker/raw_connection.hpp"

using namespace hotswap::worker;
using hotswap::testing::RawConnection;
using Clock = std::chrono::steady_clock;

namespace {

// Every request answered by an event stream that `stream` writes.
HttpListener::Handler streaming(std::function<void(ChunkSink&)> stream) {
  return [stream = std::move(stream)](HttpRequest&) {
    HttpResponse response;
    response.content_type = "text/event-stream";
    response.stream = stream;
    return response;
  };
}

bool no_probes(const HttpRequest&) {
  return false;
}

constexpr const char* kStreamRequest = "GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

}  // namespace

BOOST_AUTO_TEST_SUITE(http_listener)

// A stream writes one small chunk per token, a few milliseconds apart. With Nagle's algorithm on
// the server's socket, a chunk written while the one before it is unacknowledged waits for the
// client's ACK, which Linux may delay by 40 ms: a stream's pace is then set by the kernel rather
// than by its producer (one 32-token completion took 2.4 s under curl). Whether a client's ACKs
// come late depends on its TCP state, so the test reads the decision itself: the accepted socket
// (found among this process's descriptors, the listener being in-process) has TCP_NODELAY set.
BOOST_AUTO_TEST_CASE(streamed_chunks_leave_as_soon_as_they_are_written) {
  constexpr int kChunks = 20;
  HttpListener::Options options;
  options.threads = 2;
  HttpListener listener(options, streaming([](ChunkSink& sink) {
                          for (int i = 0; i < kChunks; ++i)
                            if (!sink.write("data: {\"token\": " + std::to_string(i) + "}\n\n"))
                              return;
                        }),
                        no_probes);
  RawConnection client(listener.port());
  BOOST_REQUIRE(client.send(kStreamRequest));
  const std::string got = client.read_until("0\r\n\r\n", std::chrono::seconds(10));
  BOOST_TEST(got.find("{\"token\": " + std::to_string(kChunks - 1) + "}") != std::string::npos);

  // The connection is kept alive: its server side is still open.
  int accepted = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    sockaddr_in local{};
    socklen_t size = sizeof local;
    int listening = 0;
    socklen_t flag_size = sizeof listening;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) != 0 ||
        local.sin_family != AF_INET || ntohs(local.sin_port) != listener.port() ||
        ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &flag_size) != 0 || listening) {
      continue;
    }
    int no_delay = 0;
    flag_size = sizeof no_delay;
    BOOST_REQUIRE(::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &no_delay, &flag_size) == 0);
    BOOST_TEST(no_delay != 0, "the accepted socket " << fd << " has Nagle's algorithm on");
    ++accepted;
  }
  BOOST_TEST(accepted == 1);
}

// A streamed response is written by its handler thread straight to the socket: the chunked
// framing must still be exact, and the connection must go back to reading requests after it.
BOOST_AUTO_TEST_CASE(a_kept_alive_connection_serves_a_request_after_a_stream) {
  HttpListener::Options options;
  options.threads = 2;
  HttpListener listener(
      options,
      [](HttpRequest& request) {
        HttpResponse response;
        if (request.target == "/plain") {
          response.body = "{\"plain\": true}";
          return response;
        }
        response.content_type = "text/event-stream";
        response.stream = [](ChunkSink& sink) {
          (void)(sink.write("data: one\n\n") && sink.write(std::string(70000, 'x')));
        };
        return response;
      },
      no_probes);
  RawConnection client(listener.port());
  BOOST_REQUIRE(client.send(kStreamRequest));
  const std::string streamed = client.read_until("\r\n0\r\n\r\n", std::chrono::seconds(10));
  const std::string body = streamed.substr(streamed.find("\r\n\r\n") + 4);
  BOOST_TEST(body == "b\r\ndata: one\n\n\r\n11170\r\n" + std::string(70000, 'x') + "\r\n0\r\n\r\n");
  BOOST_REQUIRE(client.send("GET /plain HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  BOOST_TEST(client.read_until("{\"plain\": true}", std::chrono::seconds(10)).find("200 OK") !=
             std::string::npos);
}

// Offers (the scheduler's thread writing a token's event without waiting) from a thread other
// than the handler's: what the socket cannot take waits in the sink, backlogged() says so, and
// the handler's next write sends it first, so every piece arrives whole and in order.
BOOST_AUTO_TEST_CASE(offered_pieces_the_socket_cannot_take_yet_leave_first_and_in_order) {
  HttpListener::Options options;
  options.threads = 2;
  std::promise<int> backlogged_after;
  auto offered = backlogged_after.get_future();
  auto piece = [](int i) { return std::to_string(i) + std::string(20000, 'a' + i % 26); };
  HttpListener listener(
      options, streaming([&](ChunkSink& sink) {
        int count = 0;
        std::thread([&] {
          // The client reads nothing yet: the socket's buffers fill, then the sink's.
          while (count < 10'000 && sink.offer({piece(count)}) && !sink.backlogged())
            ++count;
          ++count;  // the piece that stayed (partly) in the sink
        }).join();
        backlogged_after.set_value(count);
        (void)sink.write("last");
      }),
      no_probes);
  RawConnection client(listener.port());
  BOOST_REQUIRE(client.send(kStreamRequest));
  BOOST_REQUIRE(offered.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  const int count = offered.get();
  BOOST_TEST(count < 10'000, "never backlogged");
  std::string expected;
  for (int i = 0; i < count; ++i) {
    const std::string p = piece(i);
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", p.size());
    expected += size + p + "\r\n";
  }
  expected += "4\r\nlast\r\n0\r\n\r\n";
  const std::string streamed = client.read_until("\r\nlast\r\n0\r\n\r\n", std::chrono::seconds(20));
  BOOST_TEST((streamed.substr(streamed.find("\r\n\r\n") + 4) == expected),
             count << " pieces offered; the body differs from them in order");
}

// A client that stops reading mid-stream: once the socket's buffers are full, a piece waits for
// room no longer than the write deadline, the producer is told (write() is false) and stops; the
// listener's destruction at the end would hang the test if the handler had not returned.
BOOST_AUTO_TEST_CASE(a_stream_to_a_client_that_stopped_reading_ends_at_the_write_deadline) {
  HttpListener::Options options;
  options.threads = 2;
  options.limits.write_timeout = std::chrono::milliseconds(300);
  std::promise<Clock::duration> stopped;
  auto stopped_after = stopped.get_future();
  HttpListener listener(options, streaming([&stopped](ChunkSink& sink) {
                          Clock::time_point last_write = Clock::now();
                          for (int i = 0; i < 100'000;
                               ++i) {  // 6.4 GB: far more than the socket buffers
                            last_write = Clock::now();
                            if (!sink.write(std::string(64 << 10, 'x'))) break;
                          }
                          stopped.set_value(Clock::now() - last_write);
                        }),
                        no_probes);
  RawConnection client(listener.port());
  BOOST_REQUIRE(client.send(kStreamRequest));
  BOOST_REQUIRE(stopped_after.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  const auto blocked = stopped_after.get();
  BOOST_TEST(blocked >= std::chrono::milliseconds(250));
  BOOST_TEST(blocked < std::chrono::seconds(5));
}

BOOST_AUTO_TEST_SUITE_END()
