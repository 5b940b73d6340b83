// The NCCL unique id as vLLM's TCP rendezvous carries it. vLLM's trainer (rank 0 of a
// StatelessProcessGroup) mints an ncclUniqueId and stores `pickle.dumps(uid)` under the key
// `broadcast_from/0/0` of its TCPStore; its workers get and unpickle it. The object is a ctypes
// Structure with one field `internal: c_byte * 128`, which pickles as
//
//     _ctypes._unpickle(<the ncclUniqueId class>, ({}, <128 raw bytes>))
//
// hotswap never runs a general unpickler. The reader below walks only the handful of opcodes
// that pickle uses at protocols 3, 4 and 5 (tests/golden/vllm/nccl_unique_id.json holds the
// exact bytes vLLM 0.33 produces), checks that exact shape, and returns the 128 bytes; any
// other opcode or shape is a ValueError naming it. The class path is not checked: it moves with
// vLLM's refactors and means nothing to a reader. No libtorch here.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hotswap::transport {

inline constexpr std::size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclUniqueId = std::array<std::uint8_t, kNcclUniqueIdBytes>;

// Where vLLM 0.33 defines its ctypes ncclUniqueId (what a Python peer imports to unpickle).
inline constexpr std::string_view kVllmUniqueIdModule =
    "vllm.distributed.device_communicators.pynccl_wrapper";
inline constexpr std::string_view kVllmUniqueIdClass = "ncclUniqueId";

// The store key of the n-th object rank `src` broadcasts through vLLM's StatelessProcessGroup.
std::string stateless_broadcast_key(int src, int counter);

// The 128 id bytes inside vLLM's pickle. ValueError (naming the byte offset and opcode, or the
// shape that was found) for anything else.
NcclUniqueId unique_id_from_pickle(std::string_view pickle);

// The pickle CPython writes for vLLM's ncclUniqueId at protocol 4, byte for byte, so that a
// C++ trainer can host the rendezvous for Python vLLM workers.
std::string pickle_unique_id(const NcclUniqueId& id,
                             std::string_view class_module = kVllmUniqueIdModule,
                             std::string_view class_name = kVllmUniqueIdClass);

}  // namespace hotswap::transport
