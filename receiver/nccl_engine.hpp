// The `nccl` and `sparse_nccl` backends: the broadcast engines of gloo and sparse_gloo with an
// NCCL communicator, wire-compatible with vLLM's Python trainer. The rendezvous follows the
// handshake's init_info, in either of vLLM's modes:
//
// - TCP (`master_address`, `master_port`): join the c10d TCPStore the trainer hosts as a
//   registered client, read the pickled unique id under `broadcast_from/0/0`
//   (transport/nccl_unique_id.hpp), keep the store with the communicator;
// - unique id (`nccl_unique_id_b64`): no store, the 128 bytes are in the payload.
//
// Then ncclCommInitRank on this worker's GPU and the float32 warm-up all-reduce. A worker
// built without CUDA, or started on the CPU, refuses these backends at start with a message
// that says what to change.
#pragma once

#include <memory>

#include "receiver/broadcast_engine.hpp"

namespace hotswap::receiver {

// NCCL communicators on `device` (a CUDA device).
BroadcastWeightTransferEngine::CommunicatorFactory nccl_communicator_factory(c10::Device device);

std::unique_ptr<WeightTransferEngine> make_nccl_engine(const EngineContext& context);
std::unique_ptr<WeightTransferEngine> make_sparse_nccl_engine(const EngineContext& context);

}  // namespace hotswap::receiver
