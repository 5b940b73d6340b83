// WeightTransferEngineFactory: the worker-side registry of receive engines, by backend name.
// A backend registers with a creator, or lazily with a shared library and the name of an
// `extern "C"` creator in it (the library is dlopen'ed only when that backend is first used):
//
//   extern "C" std::unique_ptr<hotswap::receiver::WeightTransferEngine>
//   my_create_engine(const hotswap::receiver::EngineContext& context);
//
//   WeightTransferEngineFactory::register_engine("my_backend", "/opt/libmy.so",
//   "my_create_engine");
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "receiver/weight_transfer_engine.hpp"

namespace hotswap::receiver {

class WeightTransferEngineFactory {
 public:
  using CreatorSignature = std::unique_ptr<WeightTransferEngine>(const EngineContext&);
  using Creator = std::function<CreatorSignature>;

  // Duplicate names are a ValueError: "Weight transfer engine 'x' is already registered."
  static void register_engine(const std::string& name, Creator creator);
  static void register_engine(const std::string& name, std::string library_path,
                              std::string symbol);

  template <class Engine>
  static void register_engine(const std::string& name) {
    register_engine(name,
                    [](const EngineContext& context) -> std::unique_ptr<WeightTransferEngine> {
                      return std::make_unique<Engine>(context);
                    });
  }

  // The engine for `context.config.backend`. An unknown backend is a ValueError listing what is
  // available: "Invalid weight transfer backend: x. Available engines: ['disk', ...]".
  static std::unique_ptr<WeightTransferEngine> create_engine(const EngineContext& context);

  static bool is_registered(const std::string& name);
  static std::vector<std::string> registered_backends();
};

}  // namespace hotswap::receiver
