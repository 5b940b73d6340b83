#include "receiver/weight_transfer_engine_factory.hpp"

#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include "protocol/backend_names.hpp"
#include "protocol/nccl_info.hpp"
#include "receiver/recording_model.hpp"
#include "test_support.hpp"

using namespace hotswap;

namespace {

class NamedEngine final
    : public receiver::TypedWeightTransferEngine<protocol::NcclInitInfo, protocol::NcclUpdateInfo> {
 public:
  using TypedWeightTransferEngine::TypedWeightTransferEngine;
  std::string_view name() const override { return "NamedWeightTransferEngine"; }
  void start_weight_update() override {}
  void finish_weight_update() override {}
  void shutdown() override {}

 protected:
  void init_transfer_channel(const protocol::NcclInitInfo&) override {}
  void receive_weights(const protocol::NcclUpdateInfo&) override {}
};

receiver::EngineContext context_for(const std::string& backend) {
  return receiver::EngineContext{
      {backend}, {}, c10::Device(c10::kCPU), std::make_shared<testing::RecordingModel>()};
}

bool plugin_is_loaded() {
  void* handle = dlopen(HOTSWAP_RECEIVER_TEST_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

}  // namespace

using Factory = receiver::WeightTransferEngineFactory;

BOOST_AUTO_TEST_SUITE(weight_transfer_engine_factory)

BOOST_AUTO_TEST_CASE(engine_registered_by_type_is_created_by_backend_name) {
  Factory::register_engine<NamedEngine>("factory_test_named");
  BOOST_TEST(Factory::is_registered("factory_test_named"));
  auto engine = Factory::create_engine(context_for("factory_test_named"));
  BOOST_TEST(engine->name() == "NamedWeightTransferEngine");
  BOOST_TEST(engine->context().config.backend == "factory_test_named");
}

BOOST_AUTO_TEST_CASE(duplicate_registration_is_vllms_value_error) {
  Factory::register_engine<NamedEngine>("factory_test_duplicate");
  HOTSWAP_CHECK_THROW_MSG(Factory::register_engine<NamedEngine>("factory_test_duplicate"),
                          protocol::ValueError,
                          "Weight transfer engine 'factory_test_duplicate' is already registered.");
  HOTSWAP_CHECK_THROW_MSG(
      Factory::register_engine("factory_test_duplicate", "/nonexistent.so", "create"),
      protocol::ValueError, "is already registered.");
}

BOOST_AUTO_TEST_CASE(unknown_backend_lists_the_available_engines) {
  Factory::register_engine<NamedEngine>("factory_test_listed");
  try {
    Factory::create_engine(context_for("no_such_backend"));
    BOOST_FAIL("expected a ValueError");
  } catch (const protocol::ValueError& e) {
    std::string what = e.what();
    BOOST_TEST(
        what.find("Invalid weight transfer backend: no_such_backend. Available engines: [") == 0u);
    BOOST_TEST(what.find("'factory_test_listed'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(plugin_library_is_loaded_only_when_its_backend_is_first_used) {
  Factory::register_engine("factory_test_plugin", HOTSWAP_RECEIVER_TEST_PLUGIN,
                           "hotswap_test_create_engine");
  BOOST_TEST(!plugin_is_loaded());
  auto engine = Factory::create_engine(context_for("factory_test_plugin"));
  BOOST_TEST(plugin_is_loaded());
  BOOST_TEST(engine->name() == "PluginWeightTransferEngine");
  // The plugin's engine parses with the shared protocol types and wraps errors with its name.
  HOTSWAP_CHECK_THROW_MSG(engine->init_transfer_engine({{"rank_offset", 1}}), protocol::ValueError,
                          "Invalid init_info for PluginWeightTransferEngine:");
  auto second = Factory::create_engine(context_for("factory_test_plugin"));
  BOOST_TEST(second->name() == "PluginWeightTransferEngine");
}

BOOST_AUTO_TEST_CASE(a_plugin_that_cannot_load_fails_at_first_use_naming_the_cause) {
  Factory::register_engine("factory_test_missing_library", "/nonexistent/libnothing.so", "create");
  HOTSWAP_CHECK_THROW_MSG(Factory::create_engine(context_for("factory_test_missing_library")),
                          protocol::RuntimeError,
                          "Weight transfer engine 'factory_test_missing_library' could not be "
                          "loaded: cannot load shared library '/nonexistent/libnothing.so'");
  Factory::register_engine("factory_test_missing_symbol", HOTSWAP_RECEIVER_TEST_PLUGIN,
                           "no_such_symbol");
  HOTSWAP_CHECK_THROW_MSG(Factory::create_engine(context_for("factory_test_missing_symbol")),
                          protocol::RuntimeError, "symbol 'no_such_symbol' not found");
}

// The worker's engines are registered under protocol's one list of backend names.
BOOST_AUTO_TEST_CASE(every_builtin_backend_name_has_an_engine) {
  for (auto name : hotswap::protocol::backends::kBuiltin) {
    BOOST_TEST(hotswap::receiver::WeightTransferEngineFactory::is_registered(std::string(name)),
               name);
  }
}

BOOST_AUTO_TEST_SUITE_END()
