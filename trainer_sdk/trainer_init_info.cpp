#include "trainer_sdk/trainer_init_info.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace hotswap::trainer_sdk {

TrainerInitInfo::~TrainerInitInfo() = default;

std::string init_info_type_name(const TrainerInitInfo& info) {
  const char* mangled = typeid(info).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? demangled.get() : mangled;
}

}  // namespace hotswap::trainer_sdk
