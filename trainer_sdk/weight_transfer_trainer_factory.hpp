// WeightTransferTrainerFactory: the trainer-side registry of engines, keyed by the backend of
// the init info (the C++ form of vLLM's `init_info.backend` ClassVar dispatch). Registration is
// by creator, by engine type, or lazily by shared library and `extern "C"` creator symbol:
//
//   extern "C" std::unique_ptr<hotswap::trainer_sdk::TrainerWeightTransferEngine>
//   my_trainer_init(const hotswap::trainer_sdk::TrainerInitInfo& init_info,
//                   std::shared_ptr<hotswap::trainer_sdk::WeightSyncClient> client,
//                   std::shared_ptr<hotswap::trainer_sdk::WeightSource> source);
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/errors.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_settings.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"

namespace hotswap::trainer_sdk {

// An init info a launcher can build from TrainerSettings: it names the optional settings it
// reads and builds itself from them (trainer_settings.hpp).
template <class Info>
concept ReadsTrainerSettings = requires(const TrainerSettings& s) {
  { Info::settings_read.size() } -> std::convertible_to<std::size_t>;
  { Info::from_settings(s) } -> std::same_as<Info>;
};

class WeightTransferTrainerFactory {
 public:
  using CreatorSignature = std::unique_ptr<TrainerWeightTransferEngine>(
      const TrainerInitInfo&, std::shared_ptr<WeightSyncClient>, std::shared_ptr<WeightSource>);
  using Creator = std::function<CreatorSignature>;

  // Duplicate names are a ValueError: "Weight transfer trainer engine 'x' is already registered."
  static void register_engine(const std::string& name, Creator creator);
  static void register_engine(const std::string& name, std::string library_path,
                              std::string symbol);

  // Registers Engine under its init info's backend key. Engine provides
  // `using InitInfo = ...;` and `static std::unique_ptr<Engine> trainer_init(const InitInfo&,
  // std::shared_ptr<WeightSyncClient>, std::shared_ptr<WeightSource>)`.
  // An InitInfo that reads TrainerSettings is registered for launchers too.
  template <class Engine>
  static void register_engine() {
    using Info = typename Engine::InitInfo;
    static_assert(DeclaresBackend<Info>,
                  "the engine's InitInfo must set a class-level `backend` string");
    register_engine(std::string(Info::backend), creator_for<Engine>());
    if constexpr (ReadsTrainerSettings<Info>) {
      register_settings(std::string(Info::backend), settings_support_for<Info>());
    }
  }

  // What a launcher needs of a backend: the optional settings its init info reads, whether its
  // engine takes a WeightSource (a delta backend takes patches instead), and how its init info
  // is built from TrainerSettings.
  struct SettingsSupport {
    std::vector<std::string_view> reads;
    bool takes_source = true;
    std::function<std::unique_ptr<TrainerInitInfo>(const TrainerSettings&)> make;
  };
  template <class Info>
  requires ReadsTrainerSettings<Info>
  static SettingsSupport settings_support_for() {
    SettingsSupport support;
    support.reads.assign(Info::settings_read.begin(), Info::settings_read.end());
    if constexpr (requires { Info::takes_source; }) support.takes_source = Info::takes_source;
    support.make = [](const TrainerSettings& s) -> std::unique_ptr<TrainerInitInfo> {
      return std::make_unique<Info>(Info::from_settings(s));
    };
    return support;
  }
  static void register_settings(const std::string& name, SettingsSupport support);
  // The backend's (a copy: a later registration may move the table's rows); a ValueError naming
  // it when it is unknown, or was registered with a creator alone (a plugin's), which launchers
  // cannot configure.
  static SettingsSupport settings_support(const std::string& backend);
  // The backends whose init info reads `setting`, in registration order.
  static std::vector<std::string> backends_reading(std::string_view setting);

  // The creator of Engine: checks that the init info is Engine's, then calls its trainer_init.
  template <class Engine>
  static Creator creator_for() {
    using Info = typename Engine::InitInfo;
    return
        [](const TrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
           std::shared_ptr<WeightSource> source) -> std::unique_ptr<TrainerWeightTransferEngine> {
          const auto* typed = dynamic_cast<const Info*>(&info);
          if (typed == nullptr) {
            throw protocol::ValueError("trainer engine '" + std::string(Info::backend) +
                                       "' was given a " + init_info_type_name(info));
          }
          return Engine::trainer_init(*typed, std::move(client), std::move(source));
        };
  }

  // Rendezvous with the inference side through the engine registered for
  // `init_info.backend_name()`, and return it ready. An unknown backend is a ValueError listing
  // what is available: "Invalid weight transfer backend: x. Available trainer engines: [...]".
  static std::unique_ptr<TrainerWeightTransferEngine> trainer_init(
      const TrainerInitInfo& init_info, std::shared_ptr<WeightSyncClient> client,
      std::shared_ptr<WeightSource> source = nullptr);

  static bool is_registered(const std::string& name);
  static std::vector<std::string> registered_backends();
};

}  // namespace hotswap::trainer_sdk
