#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"

#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <future>

#include <ATen/ops/zeros.h>

#include "protocol/backend_names.hpp"
#include "protocol/errors.hpp"
#include "protocol/nccl_info.hpp"
#include "test_support.hpp"
#include "trainer_sdk/tensor_list_source.hpp"

using namespace hotswap;
using nlohmann::json;
using Factory = trainer_sdk::WeightTransferTrainerFactory;

namespace {

// Records every call in order, as vLLM's trainer tests do with their client.
class RecordingClient final : public trainer_sdk::WeightSyncClient {
 public:
  void init_weight_transfer_engine(const json& init_info) override {
    order.push_back("init");
    payloads.push_back(init_info);
  }
  void start_weight_update() override { order.push_back("start"); }
  void update_weights(const json& update_info) override {
    order.push_back("update");
    payloads.push_back(update_info);
  }
  void finish_weight_update(const std::optional<std::string>& version) override {
    order.push_back("finish" + (version ? ":" + *version : std::string()));
  }
  std::vector<std::string> order;
  std::vector<json> payloads;
};

struct EchoTrainerInitInfo : trainer_sdk::TrainerInitInfoFor<EchoTrainerInitInfo> {
  static constexpr std::string_view backend = "factory_test_echo";
  explicit EchoTrainerInitInfo(int rank) : TrainerInitInfoFor(rank) {}
  std::int64_t chunk_size_bytes = 256;  // a wire param, shipped at the handshake
};

// A full-resync engine that ships its wire params at init and announces the source's metadata.
class EchoTrainerEngine final : public trainer_sdk::TrainerWeightTransferEngine {
 public:
  using InitInfo = EchoTrainerInitInfo;
  using TrainerWeightTransferEngine::TrainerWeightTransferEngine;

  static std::unique_ptr<EchoTrainerEngine> trainer_init(
      const InitInfo& info, std::shared_ptr<trainer_sdk::WeightSyncClient> client,
      std::shared_ptr<trainer_sdk::WeightSource> source) {
    if (!source)
      throw protocol::ValueError("echo trainer weight transfer requires a WeightSource.");
    auto engine = std::make_unique<EchoTrainerEngine>(client, source, info.is_sender());
    if (engine->is_sender()) client->init_weight_transfer_engine({{"chunk_size_bytes", 256}});
    return engine;
  }

  void send_weights() override {
    auto meta = source()->metadata();
    auto stream = source()->iter();
    if (!is_sender()) {
      while (stream->next()) {
      }  // stay in the trainer-side collectives
      return;
    }
    client().start_weight_update();
    json info = json::object();
    protocol::write_param_lists(meta, info);
    client().update_weights(info);
    client().finish_weight_update("step-1");
  }
};

// Implements backend_name() by hand and forgets the key: the runtime check catches it.
struct KeylessTrainerInitInfo : trainer_sdk::TrainerInitInfo {
  KeylessTrainerInitInfo() : TrainerInitInfo(0) {}
  std::string_view backend_name() const override { return ""; }
};

struct UnregisteredTrainerInitInfo : trainer_sdk::TrainerInitInfoFor<UnregisteredTrainerInitInfo> {
  static constexpr std::string_view backend = "no_such_trainer_backend";
  UnregisteredTrainerInitInfo() : TrainerInitInfoFor(0) {}
};

struct PluginTrainerInitInfo : trainer_sdk::TrainerInitInfoFor<PluginTrainerInitInfo> {
  static constexpr std::string_view backend = "factory_test_trainer_plugin";
  using TrainerInitInfoFor::TrainerInitInfoFor;
};

std::shared_ptr<trainer_sdk::WeightSource> small_source() {
  return std::make_shared<trainer_sdk::TensorListSource>(
      std::vector<std::pair<std::string, at::Tensor>>{{"w", at::zeros({2, 2})}});
}

void register_echo_once() {
  if (!Factory::is_registered("factory_test_echo")) Factory::register_engine<EchoTrainerEngine>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(trainer_factory)

BOOST_AUTO_TEST_CASE(init_info_rank_decides_the_sender) {
  BOOST_TEST(EchoTrainerInitInfo(0).is_sender());
  BOOST_TEST(!EchoTrainerInitInfo(3).is_sender());
  BOOST_TEST(EchoTrainerInitInfo(0).backend_name() == "factory_test_echo");
}

BOOST_AUTO_TEST_CASE(the_init_info_backend_selects_the_engine_and_the_sender_drives_the_calls) {
  register_echo_once();
  auto client = std::make_shared<RecordingClient>();
  auto engine = Factory::trainer_init(EchoTrainerInitInfo(0), client, small_source());
  engine->send_weights();
  BOOST_TEST(client->order ==
             (std::vector<std::string>{"init", "start", "update", "finish:step-1"}));
  BOOST_TEST(client->payloads[0]["chunk_size_bytes"] == 256);
  BOOST_TEST(client->payloads[1]["names"] == json({"w"}));
  BOOST_TEST(client->payloads[1]["dtype_names"] == json({"float32"}));
}

BOOST_AUTO_TEST_CASE(a_non_sender_never_touches_the_client) {
  register_echo_once();
  auto client = std::make_shared<RecordingClient>();
  auto engine = Factory::trainer_init(EchoTrainerInitInfo(1), client, small_source());
  engine->send_weights();
  BOOST_TEST(client->order.empty());
}

BOOST_AUTO_TEST_CASE(full_resync_engine_requires_a_source) {
  register_echo_once();
  HOTSWAP_CHECK_THROW_MSG(
      Factory::trainer_init(EchoTrainerInitInfo(0), std::make_shared<RecordingClient>()),
      protocol::ValueError, "requires a WeightSource.");
}

BOOST_AUTO_TEST_CASE(duplicate_and_unknown_backends_use_vllms_messages) {
  register_echo_once();
  HOTSWAP_CHECK_THROW_MSG(
      Factory::register_engine<EchoTrainerEngine>(), protocol::ValueError,
      "Weight transfer trainer engine 'factory_test_echo' is already registered.");
  HOTSWAP_CHECK_THROW_MSG(
      Factory::trainer_init(UnregisteredTrainerInitInfo(), std::make_shared<RecordingClient>(),
                            small_source()),
      protocol::ValueError,
      "Invalid weight transfer backend: no_such_trainer_backend. Available trainer engines: [");
}

BOOST_AUTO_TEST_CASE(an_init_info_without_a_backend_key_is_rejected) {
  HOTSWAP_CHECK_THROW_MSG(
      Factory::trainer_init(KeylessTrainerInitInfo(), std::make_shared<RecordingClient>()),
      protocol::ValueError,
      "KeylessTrainerInitInfo must set a class-level `backend` string (the "
      "WeightTransferTrainerFactory registry key).");
}

BOOST_AUTO_TEST_CASE(an_engine_given_another_backends_init_info_says_so) {
  struct Impostor : trainer_sdk::TrainerInitInfo {
    Impostor() : TrainerInitInfo(0) {}
    std::string_view backend_name() const override { return "factory_test_echo"; }
  };
  register_echo_once();
  HOTSWAP_CHECK_THROW_MSG(
      Factory::trainer_init(Impostor(), std::make_shared<RecordingClient>(), small_source()),
      protocol::ValueError, "trainer engine 'factory_test_echo' was given a ");
}

// Hands the init payload, sent from the engine's side thread, to the test thread.
class InitCapturingClient final : public trainer_sdk::WeightSyncClient {
 public:
  void init_weight_transfer_engine(const json& init_info) override { init.set_value(init_info); }
  void start_weight_update() override {}
  void update_weights(const json&) override {}
  void finish_weight_update(const std::optional<std::string>&) override {}
  std::promise<json> init;
};

BOOST_AUTO_TEST_CASE(the_nccl_sender_ships_a_minted_unique_id_in_unique_id_mode) {
  auto client = std::make_shared<InitCapturingClient>();
  auto sent = client->init.get_future();
  trainer_sdk::NcclTrainerInitInfo info("", 0, 2, 0);
  info.use_unique_id = true;
  info.timeout = std::chrono::seconds(3);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(
      std::vector<std::pair<std::string, at::Tensor>>{{"w", at::zeros({2})}});
  try {
    trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
    BOOST_FAIL("an NCCL group opened with no worker in it");
  } catch (const protocol::Error& e) {
    const std::string what = e.what();
#ifdef HOTSWAP_WITH_CUDA
    // No GPU here: the device is the failure; on a GPU, the worker that never joins is.
    BOOST_TEST((what.find("cudaSetDevice") != std::string::npos ||
                what.find("NCCL init as rank 0 of 2") != std::string::npos),
               what);
    // The workers were sent the id and no TCP fields, as vLLM's unique-id mode has it.
    BOOST_REQUIRE(sent.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const json init = sent.get();
    BOOST_TEST(!init.contains("master_address"));
    auto parsed = protocol::NcclInitInfo::from_json(init);
    BOOST_TEST(parsed.nccl_unique_id.size() == 128u);
    BOOST_TEST(init["rank_offset"] == 1);
    BOOST_TEST(init["packed"] == true);
#else
    BOOST_TEST(what.find("need a GPU build of hotswap") != std::string::npos, what);
#endif
  }
}

BOOST_AUTO_TEST_CASE(plugin_trainer_engine_loads_lazily_from_its_library) {
  Factory::register_engine("factory_test_trainer_plugin", HOTSWAP_TRAINER_TEST_PLUGIN,
                           "hotswap_test_trainer_init");
  void* before = dlopen(HOTSWAP_TRAINER_TEST_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  BOOST_TEST(before == nullptr);
  auto client = std::make_shared<RecordingClient>();
  auto engine = Factory::trainer_init(PluginTrainerInitInfo(0), client, small_source());
  engine->send_weights();
  BOOST_TEST(client->order == (std::vector<std::string>{"init", "start", "update", "finish"}));
  BOOST_TEST(client->payloads[0]["from"] == "plugin");
}

// The trainer's engines are registered under the same list of names as the worker's.
BOOST_AUTO_TEST_CASE(every_builtin_backend_name_has_a_trainer_engine) {
  for (auto name : hotswap::protocol::backends::kBuiltin) {
    BOOST_TEST(hotswap::trainer_sdk::WeightTransferTrainerFactory::is_registered(std::string(name)),
               name);
  }
}

// A launcher builds any built-in backend's init info from TrainerSettings through the factory,
// and learns which settings each reads (hotswap-trainer refuses a mode flag its backend ignores).
BOOST_AUTO_TEST_CASE(launchers_build_every_builtin_init_info_from_settings) {
  trainer_sdk::TrainerSettings settings;
  settings.rank = 0;
  settings.world_size = 3;
  settings.master_address = "127.0.0.1";
  settings.master_port = 29511;
  settings.packed = false;
  settings.packed_buffer_size_bytes = 1 << 20;
  settings.trainer_ranks = 2;
  for (auto name : hotswap::protocol::backends::kBuiltin) {
    const auto support = Factory::settings_support(std::string(name));
    BOOST_TEST(support.make(settings)->backend_name() == name);
  }
  auto info = Factory::settings_support("gloo").make(settings);
  const auto& gloo = dynamic_cast<const trainer_sdk::GlooTrainerInitInfo&>(*info);
  BOOST_TEST(gloo.master_port == 29511);
  BOOST_TEST(gloo.world_size == 3);
  BOOST_TEST(!gloo.packed);
  BOOST_TEST(gloo.packed_buffer_size_bytes == (1 << 20));
  BOOST_TEST(gloo.trainer_ranks == 2);
  BOOST_TEST(Factory::settings_support("gloo").takes_source);
  BOOST_TEST(!Factory::settings_support("sparse_gloo").takes_source);
  BOOST_TEST(Factory::backends_reading(trainer_sdk::settings::kShmWindow) ==
                 (std::vector<std::string>{"shm"}),
             boost::test_tools::per_element());
  BOOST_TEST(Factory::backends_reading(trainer_sdk::settings::kTrainerRanks) ==
                 (std::vector<std::string>{"gloo", "nccl"}),
             boost::test_tools::per_element());
  HOTSWAP_CHECK_THROW_MSG(Factory::settings_support("carrier_pigeon"), protocol::ValueError,
                          "Invalid weight transfer backend: carrier_pigeon");
}

BOOST_AUTO_TEST_CASE(a_backend_registered_by_creator_alone_is_not_built_from_settings) {
  Factory::register_engine(
      "factory_test_creator_only",
      [](const trainer_sdk::TrainerInitInfo&, std::shared_ptr<trainer_sdk::WeightSyncClient>,
         std::shared_ptr<trainer_sdk::WeightSource>) {
        return std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine>();
      });
  HOTSWAP_CHECK_THROW_MSG(Factory::settings_support("factory_test_creator_only"),
                          protocol::ValueError, "was registered with a creator alone");
}

BOOST_AUTO_TEST_SUITE_END()
