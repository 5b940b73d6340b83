// TrainerInitInfo: how a caller configures a transfer on the trainer side (vLLM's
// TrainerInitInfo). It selects the backend, says which trainer rank this process is, and
// carries the wire params that the sender ships to the worker at the handshake.
//
// `rank` is explicit: the engine never reads it from a global process group, which is ambiguous
// once several groups (FSDP / TP / PP / EP) exist. Rank 0 is always the sender.
//
// Every concrete subclass declares its backend key as a class-level constant, the C++ form of
// vLLM's `backend: ClassVar[str]`, by deriving from TrainerInitInfoFor<Self>:
//
//   struct MyTrainerInitInfo : TrainerInitInfoFor<MyTrainerInitInfo> {
//     static constexpr std::string_view backend = "my_backend";
//     explicit MyTrainerInitInfo(int rank) : TrainerInitInfoFor(rank) {}
//     std::int64_t chunk_size_bytes = 256 << 20;  // a wire param, shipped to the worker
//   };
//
// A subclass without `backend` does not compile (a static_assert says what to add).
#pragma once

#include <concepts>
#include <string>
#include <string_view>

namespace hotswap::trainer_sdk {

class TrainerInitInfo {
 public:
  explicit TrainerInitInfo(int rank) : rank(rank) {}
  virtual ~TrainerInitInfo();

  // The WeightTransferTrainerFactory registry key.
  virtual std::string_view backend_name() const = 0;

  bool is_sender() const { return rank == 0; }

  int rank;

 protected:
  TrainerInitInfo(const TrainerInitInfo&) = default;
  TrainerInitInfo& operator=(const TrainerInitInfo&) = default;
};

template <class T>
concept DeclaresBackend = requires {
  { T::backend } -> std::convertible_to<std::string_view>;
};

template <class Derived>
class TrainerInitInfoFor : public TrainerInitInfo {
 public:
  explicit TrainerInitInfoFor(int rank) : TrainerInitInfo(rank) {}

  std::string_view backend_name() const final {
    static_assert(DeclaresBackend<Derived>,
                  "a TrainerInitInfo subclass must set a class-level `backend` string: add "
                  "`static constexpr std::string_view backend = \"<name>\";` (the "
                  "WeightTransferTrainerFactory registry key)");
    return Derived::backend;
  }
};

// The demangled C++ name of an init info's dynamic type, for messages.
std::string init_info_type_name(const TrainerInitInfo& info);

}  // namespace hotswap::trainer_sdk
