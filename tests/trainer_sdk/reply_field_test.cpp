// A worker's reply that lacks a field the trainer needs is named as such: the worker, the method,
// the field and what came back, never nlohmann's "[json.exception.out_of_range.403] key ...".
// The "worker" is a real ZeroMQ ROUTER on loopback that answers every call with one result.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Answers up to `calls` requests with `result`, then stops; gives up after 10 s.
class CannedWorker {
 public:
  CannedWorker(json result, int calls) : socket_(context_, zmq::socket_type::router) {
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    done_ = std::async(std::launch::async, [this, result = std::move(result), calls] {
      for (int i = 0; i < calls; ++i) {
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, 10s) == 0) return;
        std::vector<zmq::message_t> frames;
        (void)zmq::recv_multipart(socket_, std::back_inserter(frames));
        const auto request = json::parse(frames.back().to_string());
        const auto reply = json{{"jsonrpc", "2.0"}, {"id", request["id"]}, {"result", result}};
        frames.back() = zmq::message_t(reply.dump());
        zmq::send_multipart(socket_, frames);
      }
    });
  }
  ~CannedWorker() { done_.wait_for(15s); }
  const std::string& endpoint() const { return endpoint_; }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::future<void> done_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(worker_replies)

BOOST_AUTO_TEST_CASE(a_world_size_reply_without_the_field_names_worker_method_and_field) {
  CannedWorker worker({{"size", 2}}, 1);
  trainer_sdk::FanOutClient client(
      {std::make_shared<trainer_sdk::ZmqWeightSyncClient>(worker.endpoint(), 5s)});
  HOTSWAP_CHECK_THROW_MSG(client.inference_world_size(), protocol::RuntimeError,
                          "worker " + worker.endpoint() +
                              " answered get_world_size without `world_size` (its reply: "
                              "{\"size\":2})");
}

BOOST_AUTO_TEST_CASE(a_world_size_of_another_type_says_what_was_expected) {
  CannedWorker worker({{"world_size", "two"}}, 1);
  trainer_sdk::FanOutClient client(
      {std::make_shared<trainer_sdk::ZmqWeightSyncClient>(worker.endpoint(), 5s)});
  HOTSWAP_CHECK_THROW_MSG(client.inference_world_size(), protocol::RuntimeError,
                          "answered get_world_size with a `world_size` that is not a positive "
                          "integer");
}

BOOST_AUTO_TEST_CASE(checksums_of_another_shape_say_what_was_expected) {
  CannedWorker worker({{"checksums", {1, 2}}}, 1);
  trainer_sdk::ZmqWeightSyncClient client(worker.endpoint(), 5s);
  HOTSWAP_CHECK_THROW_MSG(client.checkpoint_checksums(), protocol::RuntimeError,
                          "answered weight_checker with a `checksums` that is not an object of "
                          "hex digests by tensor name");
}

BOOST_AUTO_TEST_SUITE_END()
