// Must NOT compile: a TrainerInitInfo subclass that forgot its class-level backend key.
// tests/CMakeLists.txt checks that the compiler's message says what to add.
#include "trainer_sdk/trainer_init_info.hpp"

struct ForgetfulTrainerInitInfo
    : hotswap::trainer_sdk::TrainerInitInfoFor<ForgetfulTrainerInitInfo> {
  explicit ForgetfulTrainerInitInfo(int rank) : TrainerInitInfoFor(rank) {}
};

int main() {
  ForgetfulTrainerInitInfo info(0);
  return info.backend_name().empty() ? 0 : 1;
}
