// Several trainer ranks, each holding part of a mixture of experts (expert parallelism) or of
// its layers (pipeline parallelism), push into real hotswap-worker processes over gloo: each
// tensor comes from a rank that holds it, and every round is verified bit for bit. Holdings that
// break the ownership contract (or ranks that would cut the stream differently) are
// refused at init, on every rank; a rank that fails mid-round fails them all; either way the
// worker keeps serving its weights. Trainer ranks run as threads here (each with its own engine,
// client and group membership, as processes would); tests/trainer_sdk/trainer_cli_test.sh runs them
// as processes through hotswap-trainer --ranks.
#include <boost/test/unit_test.hpp>

#include <future>

#include "e2e/e2e_support.hpp"
#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/shard_plan.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/tensor_digest.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::CheckpointDir;
using testing::WorkerProcess;

namespace {

struct MoeFixture {
  model_loader::ModelConfig config =
      testing::tiny_config(model_loader::architectures::kQwen3Moe, protocol::DType::kBFloat16);
  CheckpointDir old_ckpt{config, 5100};
  CheckpointDir new_ckpt{config, 5200};

  std::unique_ptr<WorkerProcess> worker(int dp_rank, int dp_size) const {
    return std::make_unique<WorkerProcess>(std::vector<std::string>{
        "--model", old_ckpt.dir.path.string(), "--weight-transfer-config", R"({"backend": "gloo"})",
        "--data-parallel-rank", std::to_string(dp_rank), "--data-parallel-size",
        std::to_string(dp_size), "--timeout", "20"});
  }

  // The new checkpoint as trainer rank `rank` of `ranks` holds it: metadata of the whole model,
  // tensors of its share. `drop` leaves one more name out (to orphan it).
  std::shared_ptr<trainer_sdk::TensorListSource> share(trainer_sdk::ShardBy by, int rank, int ranks,
                                                       const std::string& drop = "") const {
    std::vector<protocol::ParamMeta> meta;
    std::vector<std::string> names;
    auto tensors = new_ckpt.tensors();
    for (const auto& [name, t] : tensors) {
      meta.push_back(trainer_sdk::param_meta_of(name, t));
      names.push_back(name);
    }
    auto held = trainer_sdk::held_by_rank(names, by, rank, ranks);
    std::map<std::string, at::Tensor> mine;
    for (const auto& [name, t] : tensors) {
      if (held.contains(name) && name != drop) mine.emplace(name, t);
    }
    return std::make_shared<trainer_sdk::TensorListSource>(std::move(meta), std::move(mine));
  }

  void verify(trainer_sdk::ZmqWeightSyncClient& client) const {
    testing::verify_serves(client, new_ckpt);
  }
};

// Runs `round(rank)` for every trainer rank at once, one thread each, and returns each rank's
// failure (nullptr where it succeeded). Waits at most `timeout` for each.
template <class Round>
std::vector<std::exception_ptr> on_every_rank(int ranks, Round round,
                                              std::chrono::seconds timeout = 60s) {
  std::vector<std::future<void>> running;
  for (int r = 0; r < ranks; ++r)
    running.push_back(std::async(std::launch::async, round, r));
  std::vector<std::exception_ptr> failures;
  for (auto& f : running) {
    BOOST_REQUIRE(f.wait_for(timeout) == std::future_status::ready);
    try {
      f.get();
      failures.push_back(nullptr);
    } catch (...) {
      failures.push_back(std::current_exception());
    }
  }
  return failures;
}

std::string message_of(const std::exception_ptr& failure) {
  try {
    if (failure) std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(many_senders)

BOOST_FIXTURE_TEST_CASE(two_trainer_ranks_each_send_what_they_hold_to_two_workers, MoeFixture) {
  auto w0 = worker(0, 2);
  auto w1 = worker(1, 2);
  // Expert parallel and packed, then pipeline parallel and unpacked.
  for (auto [by, packed] : {std::pair{trainer_sdk::ShardBy::kExperts, true},
                            std::pair{trainer_sdk::ShardBy::kLayers, false}}) {
    const int port = transport::pick_free_port();
    const std::string version = by == trainer_sdk::ShardBy::kExperts ? "experts" : "layers";
    auto failures = on_every_rank(2, [&](int rank) {
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>> clients{
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w0->endpoint(), 30s),
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w1->endpoint(), 30s)};
      auto client = std::make_shared<trainer_sdk::FanOutClient>(clients);
      trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", port, 4, rank);
      info.trainer_ranks = 2;
      info.packed = packed;
      info.packed_buffer_size_bytes = 3000;  // chunks within each rank's runs
      info.timeout = 30s;
      auto engine =
          trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, share(by, rank, 2));
      // Each rank verifies the tensors it holds once send_weights returns: the round committed.
      engine->push({version, /*verify=*/true});
      engine->shutdown();
    });
    for (int r = 0; r < 2; ++r)
      BOOST_TEST(!failures[r], "rank " << r << ": " << message_of(failures[r]));
    for (auto* w : {w0.get(), w1.get()}) {
      trainer_sdk::ZmqWeightSyncClient client(w->endpoint(), 30s);
      verify(client);
      BOOST_TEST(client.call("weight_info")["weight_version"] == version);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(owners_name_the_broadcasters_as_vllm_034_plans_them, MoeFixture) {
  // Three trainer ranks: ranks 0 and 1 both own everything but the experts (rank 0 first, so it
  // broadcasts them), rank 2 owns the experts. The broadcasters are ranks 0 and 2: only they
  // join the group (rank_offset 2), rank 1 only iterates, and rank 0 makes two update_weights
  // calls, src 0 then src 1.
  auto w0 = worker(0, 2);
  auto w1 = worker(1, 2);
  auto tensors = new_ckpt.tensors();
  auto is_expert = [](const std::string& name) {
    return name.find(".experts.") != std::string::npos;
  };
  auto source_for = [&](int rank) {
    std::vector<protocol::ParamMeta> meta;
    std::map<std::string, at::Tensor> mine;
    for (const auto& [name, t] : tensors) {
      auto m = trainer_sdk::param_meta_of(name, t);
      m.owners = is_expert(name) ? std::vector<std::int64_t>{2} : std::vector<std::int64_t>{0, 1};
      if (std::find(m.owners->begin(), m.owners->end(), rank) != m.owners->end()) {
        mine.emplace(name, t);
      }
      meta.push_back(std::move(m));
    }
    return std::make_shared<trainer_sdk::TensorListSource>(std::move(meta), std::move(mine));
  };
  for (bool packed : {true, false}) {
    const int port = transport::pick_free_port();
    const std::string version = packed ? "owners-packed" : "owners";
    auto failures = on_every_rank(3, [&](int rank) {
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>> clients{
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w0->endpoint(), 30s),
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w1->endpoint(), 30s)};
      auto client = std::make_shared<trainer_sdk::FanOutClient>(clients);
      // Two broadcasters plus the workers' ranks, as vLLM's recipe sizes the group.
      trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", port, 2 + client->inference_world_size(),
                                            rank);
      info.trainer_ranks = 3;
      info.packed = packed;
      info.packed_buffer_size_bytes = 3000;
      info.timeout = 30s;
      auto engine =
          trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source_for(rank));
      BOOST_TEST(engine->sends_weights() == (rank != 1));
      engine->push({version, /*verify=*/false});
      engine->shutdown();
    });
    for (int r = 0; r < 3; ++r)
      BOOST_TEST(!failures[r], "rank " << r << ": " << message_of(failures[r]));
    for (auto* w : {w0.get(), w1.get()}) {
      trainer_sdk::ZmqWeightSyncClient client(w->endpoint(), 30s);
      verify(client);
      BOOST_TEST(client.call("weight_info")["weight_version"] == version);
    }
  }

  // vLLM's ownership errors, on every rank, before anything is sent: rank 1 also owning an
  // expert puts it under two broadcasters.
  auto failures = on_every_rank(3, [&](int rank) {
    auto source = source_for(rank);
    auto meta = source->metadata();
    for (auto& m : meta) {
      if (is_expert(m.name)) m.owners = std::vector<std::int64_t>{2, 1};
    }
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 4, rank);
    info.trainer_ranks = 3;
    auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w0->endpoint(), 30s);
    trainer_sdk::WeightTransferTrainerFactory::trainer_init(
        info, client,
        std::make_shared<trainer_sdk::TensorListSource>(std::move(meta),
                                                        std::map<std::string, at::Tensor>{}));
  });
  for (int r = 0; r < 3; ++r) {
    BOOST_TEST(
        message_of(failures[r])
                .find("rank 1 owns parameters broadcast by ranks 0 and 2, but each broadcaster "
                      "sends in its own turn") != std::string::npos,
        message_of(failures[r]));
  }
}

BOOST_FIXTURE_TEST_CASE(an_orphan_or_a_disagreeing_metadata_is_refused_at_init_on_every_rank,
                        MoeFixture) {
  auto w = worker(0, 1);
  trainer_sdk::ZmqWeightSyncClient observer(w->endpoint(), 30s);
  const auto before = observer.call("weight_checker", {{"action", "checksum"}});
  const std::string orphan = "model.layers.0.mlp.experts.3.up_proj.weight";
  auto refused = [&](auto source_of, std::int64_t rank1_buffer_size = 1 << 20) {
    const int port = transport::pick_free_port();
    return on_every_rank(2, [&, port](int rank) {
      auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
      trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", port, 3, rank);
      info.trainer_ranks = 2;
      info.packed_buffer_size_bytes = rank == 1 ? rank1_buffer_size : 1 << 20;
      info.timeout = 20s;
      trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source_of(rank));
    });
  };
  // The rank holding the last expert leaves one of its tensors out: nobody holds it.
  auto failures = refused([&](int rank) {
    return share(trainer_sdk::ShardBy::kExperts, rank, 2, rank == 1 ? orphan : "");
  });
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(
        message_of(failures[r])
                .find(
                    "'" + orphan +
                    "' is held by no trainer rank (held_names() of ranks 0..1): every name must be "
                    "held by at least one rank, or it can never be served") == 0u,
        "rank " << r << ": " << message_of(failures[r]));
  }
  // Rank 1 reports only its own share as metadata.
  failures = refused([&](int rank) -> std::shared_ptr<trainer_sdk::WeightSource> {
    auto mine = share(trainer_sdk::ShardBy::kExperts, rank, 2);
    if (rank == 0) return mine;
    std::vector<std::pair<std::string, at::Tensor>> only_held;
    auto stream = mine->iter();
    while (auto item = stream->next()) {
      if (item->held()) only_held.emplace_back(item->name, item->tensor);
    }
    return std::make_shared<trainer_sdk::TensorListSource>(only_held);
  });
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(message_of(failures[r])
                       .find("metadata() must describe the WHOLE model on every "
                             "rank") == 0u,
               "rank " << r << ": " << message_of(failures[r]));
  }
  // Rank 1 would cut packed chunks elsewhere than rank 0 and the workers.
  failures =
      refused([&](int rank) { return share(trainer_sdk::ShardBy::kExperts, rank, 2); }, 4096);
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(message_of(failures[r]).find("trainer rank 1's transfer settings") == 0u,
               "rank " << r << ": " << message_of(failures[r]));
  }
  // Nothing was sent: the worker serves its old weights, and a good trainer's round then works.
  BOOST_TEST(observer.call("weight_checker", {{"action", "checksum"}}) == before);
  BOOST_TEST(observer.call("health")["status"] == "ok");
  const int port = transport::pick_free_port();
  auto ok = on_every_rank(2, [&](int rank) {
    auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", port, 3, rank);
    info.trainer_ranks = 2;
    info.timeout = 20s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
        info, client, share(trainer_sdk::ShardBy::kExperts, rank, 2));
    engine->push({"after-refusals", /*verify=*/true});
  });
  BOOST_TEST(!ok[0], message_of(ok[0]));
  BOOST_TEST(!ok[1], message_of(ok[1]));
  verify(observer);
}

// A source that breaks the contract on purpose: it holds (by held_names()) what `real` holds,
// but its iteration leaves out `missing`, or yields `extra` after the end.
class LyingSource final : public trainer_sdk::WeightSource {
 public:
  LyingSource(std::shared_ptr<trainer_sdk::TensorListSource> real, std::string missing,
              std::string extra = "")
      : real_(std::move(real)), missing_(std::move(missing)), extra_(std::move(extra)) {}
  std::vector<protocol::ParamMeta> metadata() override { return real_->metadata(); }
  std::optional<std::unordered_set<std::string>> held_names() override {
    return real_->held_names();
  }
  std::unique_ptr<trainer_sdk::WeightStream> iter() override {
    std::vector<std::pair<std::string, at::Tensor>> items;
    auto stream = real_->iter();
    while (auto item = stream->next()) {
      if (item->name == missing_) item->tensor = at::Tensor();
      items.emplace_back(item->name, item->tensor);
    }
    if (!extra_.empty()) items.emplace_back(extra_, at::Tensor());
    return std::make_unique<Replay>(std::move(items));
  }

 private:
  class Replay final : public trainer_sdk::WeightStream {
   public:
    explicit Replay(std::vector<std::pair<std::string, at::Tensor>> items)
        : items_(std::move(items)) {}
    std::optional<trainer_sdk::NamedWeight> next() override {
      if (at_ == items_.size()) return std::nullopt;
      const auto& [name, tensor] = items_[at_++];
      return trainer_sdk::NamedWeight{name, tensor};
    }

   private:
    std::vector<std::pair<std::string, at::Tensor>> items_;
    std::size_t at_ = 0;
  };
  std::shared_ptr<trainer_sdk::TensorListSource> real_;
  std::string missing_, extra_;
};

BOOST_FIXTURE_TEST_CASE(a_rank_that_fails_mid_round_fails_every_rank_and_the_worker_keeps_weights,
                        MoeFixture) {
  auto w = worker(0, 1);
  trainer_sdk::ZmqWeightSyncClient observer(w->endpoint(), 30s);
  const auto before = observer.call("weight_checker", {{"action", "checksum"}});
  // `liar`'s source is a LyingSource(missing, extra); the other rank's is honest.
  // Each round fails well within the ranks' 20 s timeout: nobody waits it out.
  auto round = [&](int liar, const std::string& missing, const std::string& extra) {
    const int port = transport::pick_free_port();
    const auto start = std::chrono::steady_clock::now();
    auto failures = on_every_rank(2, [&, port](int rank) {
      auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
      trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", port, 3, rank);
      info.trainer_ranks = 2;
      info.packed = false;
      info.timeout = 20s;
      auto real = share(trainer_sdk::ShardBy::kExperts, rank, 2);
      std::shared_ptr<trainer_sdk::WeightSource> source = real;
      if (rank == liar) source = std::make_shared<LyingSource>(real, missing, extra);
      auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
      engine->push({"never", /*verify=*/false});
    });
    BOOST_TEST((std::chrono::steady_clock::now() - start < 15s));
    return failures;
  };
  // The workers end the session (where the bytes had all landed, rank 0 ends it with hotswap's
  // `abort_update`: a plain shutdown is refused mid-update, as vLLM 0.34 refuses it) and keep
  // their weights.
  auto unchanged = [&] {
    BOOST_TEST(testing::wait_for_session_end(observer, 10s));
    BOOST_TEST(observer.call("weight_checker", {{"action", "checksum"}}) == before);
  };

  // Rank 1 holds an expert tensor (by held_names()) that its iteration does not yield.
  const std::string missing = "model.layers.0.mlp.experts.2.down_proj.weight";
  auto failures = round(1, missing, "");
  std::string cause = "yielded no tensor for '" + missing + "'";
  BOOST_TEST(message_of(failures[1]).find(cause) != std::string::npos, message_of(failures[1]));
  // Rank 0 names rank 1's cause, not just its own broken collective.
  BOOST_TEST(message_of(failures[0]).find("trainer rank 1 failed round 1: ") == 0u,
             message_of(failures[0]));
  BOOST_TEST(message_of(failures[0]).find(cause) != std::string::npos, message_of(failures[0]));
  unchanged();

  // Rank 1's pass yields one name more than the metadata, after its last broadcast: rank 0 must
  // not commit a round a rank failed.
  failures = round(1, "", "model.layers.9.not_declared.weight");
  cause = "WeightSource yielded more parameters than metadata declared";
  BOOST_TEST(message_of(failures[1]).find(cause) != std::string::npos, message_of(failures[1]));
  BOOST_TEST(message_of(failures[0]).find("trainer rank 1 failed round 1: " + cause) == 0u,
             message_of(failures[0]));
  unchanged();

  // Rank 0 fails: rank 1 fails too, promptly (the group is torn down), and nothing commits.
  const std::string rank0_expert = "model.layers.0.mlp.experts.0.down_proj.weight";
  failures = round(0, rank0_expert, "");
  BOOST_TEST(message_of(failures[0]).find("yielded no tensor for '" + rank0_expert + "'") !=
                 std::string::npos,
             message_of(failures[0]));
  BOOST_CHECK(failures[1] != nullptr);
  unchanged();
}

BOOST_AUTO_TEST_SUITE_END()
