// The fault-injection points of a trainer's round (trainer_sdk/round_hook.hpp), as engines reach
// them: each in its place among the four calls, kInit and kMidUpdate while the call they name is
// in flight, each once per round. hotswap-trainer's --fault-at relies on exactly that.
#include "trainer_sdk/round_hook.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/Context.h>
#include <ATen/ops/zeros.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/disk_trainer_engine.hpp"
#include "trainer_sdk/ipc_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "transport/device.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using Factory = trainer_sdk::WeightTransferTrainerFactory;
using trainer_sdk::RoundPoint;

namespace {

constexpr auto kPatience = 5s;

// The workers as the round hook sees them: the four calls and the points reached, in one log.
// init and update stay in flight until the hook has seen them there, as hotswap-trainer's
// --fault-at waits for the worker's `health` to name the call before it strikes.
class HoldingClient final : public trainer_sdk::WeightSyncClient {
 public:
  void init_weight_transfer_engine(const json&) override { hold("init"); }
  void start_weight_update() override { note("start"); }
  void update_weights(const json&) override {
    hold("update");
    if (reject_updates) throw protocol::ValueError("the worker rejected the update");
  }
  void finish_weight_update(const std::optional<std::string>& version) override {
    note("finish" + (version ? ":" + *version : std::string()));
  }

  // The round hook. A point inside a call is noted once that call is in flight, which then
  // returns; a point reached with nothing in flight says so.
  void reached(RoundPoint point) {
    const std::string name(trainer_sdk::round_point_name(point));
    std::unique_lock lock(mutex_);
    if (point == RoundPoint::kStarted) seen_.erase("update");  // each round's first is held
    if (point != RoundPoint::kInit && point != RoundPoint::kMidUpdate) {
      log_.push_back("@" + name);
      return;
    }
    const bool inside =
        changed_.wait_for(lock, kPatience, [&] { return in_flight_.contains(name); });
    log_.push_back(inside ? "@" + name : "@" + name + " with no call in flight");
    seen_.insert(name);
    changed_.notify_all();
  }

  std::vector<std::string> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }
  // Forgets the log and the calls seen: the next init and update are held again.
  void clear() {
    std::lock_guard lock(mutex_);
    log_.clear();
    seen_.clear();
  }

  std::atomic<bool> reject_updates{false};

 private:
  void note(const std::string& entry) {
    std::lock_guard lock(mutex_);
    log_.push_back(entry);
  }
  void hold(const std::string& call) {
    std::unique_lock lock(mutex_);
    log_.push_back(call);
    in_flight_.insert(call);
    changed_.notify_all();
    changed_.wait_for(lock, kPatience, [&] { return seen_.contains(call); });
    in_flight_.erase(call);
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> log_;
  std::set<std::string> in_flight_;
  std::set<std::string> seen_;  // calls the hook has seen in flight: later ones pass
};

// A HoldingClient installed as the process's round hook for one test case.
struct Observed {
  Observed() {
    trainer_sdk::set_round_hook([held = client](RoundPoint point) { held->reached(point); });
  }
  ~Observed() { trainer_sdk::set_round_hook({}); }
  Observed(const Observed&) = delete;
  Observed& operator=(const Observed&) = delete;

  std::shared_ptr<HoldingClient> client = std::make_shared<HoldingClient>();
};

std::shared_ptr<trainer_sdk::WeightSource> two_tensors() {
  return std::make_shared<trainer_sdk::TensorListSource>(
      std::vector<std::pair<std::string, at::Tensor>>{{"a", at::zeros({16})},
                                                      {"b", at::zeros({4, 4})}});
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(round_hooks, Observed)

BOOST_AUTO_TEST_CASE(the_disk_sender_reaches_each_point_in_its_place_among_the_calls) {
  testing::TempDir dir;
  trainer_sdk::DiskTrainerInitInfo info(dir.path, 0);
  info.timeout = 10s;
  auto engine = Factory::trainer_init(info, client, two_tensors());
  engine->push({"round-1", false});
  BOOST_TEST(client->log() ==
             (std::vector<std::string>{"init", "@init", "start", "@start", "update", "@update",
                                       "@finish", "finish:round-1"}));
}

BOOST_AUTO_TEST_CASE(a_round_whose_update_fails_reaches_no_finish_and_the_next_round_all_points) {
  testing::TempDir dir;
  trainer_sdk::DiskTrainerInitInfo info(dir.path, 0);
  info.timeout = 10s;
  auto engine = Factory::trainer_init(info, client, two_tensors());
  client->clear();
  client->reject_updates = true;
  HOTSWAP_CHECK_THROW_MSG(engine->push({"round-1", false}), protocol::ValueError,
                          "the worker rejected the update");
  BOOST_TEST(client->log() == (std::vector<std::string>{"start", "@start", "update", "@update"}));
  client->clear();
  client->reject_updates = false;
  engine->push({"round-2", false});
  BOOST_TEST(client->log() == (std::vector<std::string>{"start", "@start", "update", "@update",
                                                        "@finish", "finish:round-2"}));
}

// ipc once passed none of the points. Its handshake needs no GPU; its rounds do.
BOOST_AUTO_TEST_CASE(the_ipc_sender_reaches_init_inside_its_handshake) {
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.timeout = 10s;
  if (!transport::built_with_cuda()) {
    HOTSWAP_CHECK_THROW_MSG(Factory::trainer_init(info, client, two_tensors()),
                            protocol::ValueError, "needs a GPU build of hotswap");
    return;
  }
  auto engine = Factory::trainer_init(info, client, two_tensors());
  BOOST_TEST(engine->is_sender());
  BOOST_TEST(client->log() == (std::vector<std::string>{"init", "@init"}));
}

BOOST_AUTO_TEST_CASE(the_ipc_sender_reaches_each_point_of_a_round_packed_or_not) {
  const auto gpu = transport::gpu_runtime_info();
  if (gpu.device_count == 0 || !at::hasCUDA()) {
    BOOST_TEST_MESSAGE("no GPU here (" << gpu.device_error << "): an ipc round needs one");
    return;
  }
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.timeout = 10s;
  auto unpacked = Factory::trainer_init(info, client, two_tensors());
  unpacked->push({"unpacked", false});
  BOOST_TEST(client->log() ==
             (std::vector<std::string>{"init", "@init", "start", "@start", "update", "@update",
                                       "@finish", "finish:unpacked"}));
  unpacked->shutdown();

  client->clear();
  info.packed = true;
  info.packed_buffer_size_bytes = 64;  // one tensor a chunk: two update calls, one point
  auto packed = Factory::trainer_init(info, client, two_tensors());
  packed->push({"packed", false});
  BOOST_TEST(client->log() ==
             (std::vector<std::string>{"init", "@init", "start", "@start", "update", "@update",
                                       "update", "@finish", "finish:packed"}));
  packed->shutdown();
}

BOOST_AUTO_TEST_SUITE_END()
