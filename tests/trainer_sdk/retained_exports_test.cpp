// Exported memory outlives every chance a worker still maps it (trainer_sdk/retained_exports.hpp):
// freed once a round finished or a shutdown was answered, kept through a failure or a timeout,
// and never freed by a destructor that had no word from the worker. Freeing memory another
// process maps is undefined behaviour, so a trainer relies on all three.
#include "trainer_sdk/retained_exports.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/Context.h>
#include <ATen/ops/zeros.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/ipc_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_sync_client.hpp"
#include "transport/device.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using trainer_sdk::RetainedExports;

namespace {

// Owners whose "free" is recorded instead of done. Each deleter holds the ledger, so one that
// is kept until exit never points at a test's dead stack.
struct Ledger : std::enable_shared_from_this<Ledger> {
  RetainedExports::Owner owner(int id) {
    auto self = shared_from_this();
    return RetainedExports::Owner(&slots.at(id), [self, id](void*) { self->freed.insert(id); });
  }
  std::array<char, 8> slots{};  // distinct addresses, one per owner
  std::set<int> freed;
};

std::shared_ptr<Ledger> ledger() {
  return std::make_shared<Ledger>();
}

// A round that offers `owner` to the worker and then times out, as update_in_place does.
void time_out_offering(RetainedExports& retained, const RetainedExports::Owner& owner) {
  BOOST_CHECK_THROW(retained.release_after([&] {
    retained.retain(owner);
    throw protocol::TimeoutError("update_weights did not return within 10 ms");
  }),
                    protocol::TimeoutError);
}

// A worker as the end of a session sees it: it closes its channel, or refuses as vLLM does
// mid-update.
class ShutdownClient final : public trainer_sdk::WeightSyncClient {
 public:
  void init_weight_transfer_engine(const json&) override {}
  void start_weight_update() override {}
  void update_weights(const json&) override {}
  void finish_weight_update(const std::optional<std::string>&) override {}
  void abort_and_shutdown_weight_transfer_engine() override {
    ++shutdowns;
    if (refuse) {
      throw protocol::RuntimeError("Cannot release a trainer connection during a weight update");
    }
  }
  bool refuse = false;
  int shutdowns = 0;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(retained_exports)

BOOST_AUTO_TEST_CASE(exports_are_freed_once_a_round_through_its_finish_succeeds) {
  auto book = ledger();
  RetainedExports retained;
  retained.release_after([&] {
    retained.retain(book->owner(0));
    retained.retain(book->owner(1));
    BOOST_TEST(book->freed.empty());  // no one else holds them: held by `retained` alone
  });
  BOOST_TEST(retained.empty());
  BOOST_TEST(book->freed == (std::set<int>{0, 1}));
}

BOOST_AUTO_TEST_CASE(a_round_that_fails_or_times_out_keeps_its_exports_and_raises) {
  auto book = ledger();
  RetainedExports retained;
  time_out_offering(retained, book->owner(0));
  HOTSWAP_CHECK_THROW_MSG(retained.release_after([&] {
    retained.retain(book->owner(1));
    throw protocol::TransferError("the worker failed the update");
  }),
                          protocol::TransferError, "failed the update");
  BOOST_TEST(retained.size() == 2u);
  BOOST_TEST(book->freed.empty());
}

BOOST_AUTO_TEST_CASE(a_later_round_that_finishes_frees_what_a_failed_round_kept) {
  auto book = ledger();
  RetainedExports retained;
  time_out_offering(retained, book->owner(0));
  retained.release_after([&] { retained.retain(book->owner(1)); });
  BOOST_TEST(retained.empty());
  BOOST_TEST(book->freed == (std::set<int>{0, 1}));
}

BOOST_AUTO_TEST_CASE(a_buffer_offered_every_round_is_held_once) {
  auto book = ledger();
  RetainedExports retained;
  auto buffer = book->owner(0);
  for (int round = 0; round < 3; ++round)
    time_out_offering(retained, buffer);
  BOOST_TEST(retained.size() == 1u);
  buffer.reset();  // the engine's shutdown drops its own reference
  BOOST_TEST(book->freed.empty());
}

BOOST_AUTO_TEST_CASE(a_tensor_stays_allocated_while_held) {
  at::Tensor copy = at::zeros({16});
  const auto alone = copy.use_count();
  RetainedExports retained;
  retained.retain(std::make_shared<at::Tensor>(copy));
  BOOST_TEST(copy.use_count() == alone + 1);
  retained.release_after([] {});
  BOOST_TEST(copy.use_count() == alone);
}

BOOST_AUTO_TEST_CASE(exports_held_at_destruction_are_kept_until_exit_never_freed) {
  auto book = ledger();
  const auto kept_before = trainer_sdk::exports_kept_until_exit();
  {
    RetainedExports retained;
    time_out_offering(retained, book->owner(0));
    time_out_offering(retained, book->owner(1));
  }
  BOOST_TEST(book->freed.empty());
  BOOST_TEST(trainer_sdk::exports_kept_until_exit() == kept_before + 2);
}

BOOST_AUTO_TEST_CASE(nothing_is_kept_until_exit_after_a_round_that_finished) {
  auto book = ledger();
  const auto kept_before = trainer_sdk::exports_kept_until_exit();
  {
    RetainedExports retained;
    retained.release_after([&] { retained.retain(book->owner(0)); });
  }
  BOOST_TEST(book->freed == (std::set<int>{0}));
  BOOST_TEST(trainer_sdk::exports_kept_until_exit() == kept_before);
}

BOOST_AUTO_TEST_CASE(a_session_whose_shutdown_is_answered_frees_everything) {
  auto book = ledger();
  ShutdownClient worker;
  RetainedExports retained;
  retained.retain(book->owner(0));
  retained.end_session(worker);
  BOOST_TEST(worker.shutdowns == 1);
  BOOST_TEST(retained.empty());
  BOOST_TEST(book->freed == (std::set<int>{0}));
}

BOOST_AUTO_TEST_CASE(a_refused_shutdown_keeps_everything_and_does_not_raise) {
  auto book = ledger();
  ShutdownClient worker;
  worker.refuse = true;
  const auto kept_before = trainer_sdk::exports_kept_until_exit();
  {
    RetainedExports retained;
    retained.retain(book->owner(0));
    retained.end_session(worker);
    BOOST_TEST(worker.shutdowns == 1);
    BOOST_TEST(retained.size() == 1u);
  }
  BOOST_TEST(book->freed.empty());
  BOOST_TEST(trainer_sdk::exports_kept_until_exit() == kept_before + 1);
}

BOOST_AUTO_TEST_CASE(ending_a_session_with_nothing_held_asks_the_worker_nothing) {
  ShutdownClient worker;
  RetainedExports retained;
  retained.end_session(worker);
  BOOST_TEST(worker.shutdowns == 0);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// The ipc sender's workers: each update answered, failed, or left running past the timeout.
class UpdateClient final : public trainer_sdk::WeightSyncClient {
 public:
  enum class Update { kAnswer, kFail, kHang };
  void init_weight_transfer_engine(const json&) override {}
  void start_weight_update() override {}
  void update_weights(const json&) override {
    if (update == Update::kFail) throw protocol::TransferError("the worker failed the update");
    if (update == Update::kHang) std::this_thread::sleep_for(500ms);
  }
  void finish_weight_update(const std::optional<std::string>&) override {}
  void abort_and_shutdown_weight_transfer_engine() override { ++shutdowns; }
  std::atomic<Update> update{Update::kAnswer};
  std::atomic<int> shutdowns{0};
};

std::shared_ptr<trainer_sdk::WeightSource> two_tensors() {
  return std::make_shared<trainer_sdk::TensorListSource>(
      std::vector<std::pair<std::string, at::Tensor>>{{"a", at::zeros({16})},
                                                      {"b", at::zeros({4, 4})}});
}

bool no_gpu_here() {
  const auto gpu = transport::gpu_runtime_info();
  if (gpu.device_count > 0 && at::hasCUDA()) return false;
  BOOST_TEST_MESSAGE("no GPU here (" << gpu.device_error << "): an ipc round needs one");
  return true;
}

}  // namespace

// The same rules through the ipc sender itself (its rounds need a GPU; skipped without one).
BOOST_AUTO_TEST_SUITE(ipc_trainer_retention)

BOOST_AUTO_TEST_CASE(an_unpacked_round_keeps_its_tensors_until_a_later_round_finishes) {
  if (no_gpu_here()) return;
  auto worker = std::make_shared<UpdateClient>();
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.timeout = 100ms;
  auto engine = trainer_sdk::IpcTrainerEngine::trainer_init(info, worker, two_tensors());
  worker->update = UpdateClient::Update::kHang;
  BOOST_CHECK_THROW(engine->push({"timed-out", false}), protocol::TimeoutError);
  BOOST_TEST(engine->retained_exports() == 2u);
  worker->update = UpdateClient::Update::kFail;
  BOOST_CHECK_THROW(engine->push({"failed", false}), protocol::TransferError);
  BOOST_TEST(engine->retained_exports() == 4u);
  worker->update = UpdateClient::Update::kAnswer;
  engine->push({"finished", false});
  BOOST_TEST(engine->retained_exports() == 0u);
  engine->shutdown();
  BOOST_TEST(worker->shutdowns == 0);  // nothing held: the worker's channel is left alone
}

BOOST_AUTO_TEST_CASE(a_packed_buffer_a_failed_round_offered_is_freed_only_by_an_answered_shutdown) {
  if (no_gpu_here()) return;
  auto worker = std::make_shared<UpdateClient>();
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.timeout = 100ms;
  info.packed = true;
  info.packed_buffer_size_bytes = 64;
  auto engine = trainer_sdk::IpcTrainerEngine::trainer_init(info, worker, two_tensors());
  worker->update = UpdateClient::Update::kFail;
  BOOST_CHECK_THROW(engine->push({"failed", false}), protocol::TransferError);
  BOOST_CHECK_THROW(engine->push({"failed", false}), protocol::TransferError);
  BOOST_TEST(engine->retained_exports() == 1u);
  engine->shutdown();
  BOOST_TEST(worker->shutdowns == 1);
  BOOST_TEST(engine->retained_exports() == 0u);
}

BOOST_AUTO_TEST_CASE(an_engine_destroyed_after_a_failed_round_keeps_its_exports_until_exit) {
  if (no_gpu_here()) return;
  auto worker = std::make_shared<UpdateClient>();
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.timeout = 100ms;
  const auto kept_before = trainer_sdk::exports_kept_until_exit();
  {
    auto engine = trainer_sdk::IpcTrainerEngine::trainer_init(info, worker, two_tensors());
    worker->update = UpdateClient::Update::kFail;
    BOOST_CHECK_THROW(engine->push({"failed", false}), protocol::TransferError);
  }
  BOOST_TEST(trainer_sdk::exports_kept_until_exit() == kept_before + 2);
}

BOOST_AUTO_TEST_SUITE_END()
