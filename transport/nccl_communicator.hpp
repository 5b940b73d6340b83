// NcclCommunicator: a Communicator over one NCCL communicator, for the `nccl` and `sparse_nccl`
// backends. Plain NCCL and CUDA runtime C APIs on tensor data pointers, so it builds against a
// CPU-only libtorch too. Declared in every build; in a build without CUDA, creating one (or a
// unique id) throws the "needs a GPU build" ValueError.
//
// - Init is non-blocking (ncclConfig_t.blocking = 0) and polled, so a peer that never joins
//   ends in a TimeoutError after the timeout instead of a hang; then the one-element float32
//   all-reduce every vLLM communicator issues first.
// - Each collective runs on the communicator's own non-blocking stream, ordered after the
//   caller's current libtorch stream with an event: work queued on the tensors before the call
//   (on any stream the caller made current) comes first, without a device sync, and kernels
//   queued on libtorch's streams meanwhile (generation during an update) do not wait behind a
//   collective that waits for a slow peer. The call returns once the collective has completed
//   on the device (polled with the communicator's async error), so the bytes are in place when
//   it returns, for every stream. A queued all-reduce (tensor-parallel forward steps) skips that
//   host wait: the caller's stream waits for it on the device, and wait_queued() polls once.
// - The tensors a collective uses are recorded on the communicator's stream with libtorch's
//   caching allocator, so that memory freed by the caller (after a timeout, say) is not handed
//   out again before the collective has let go of it.
// - On a timeout or an asynchronous NCCL error the communicator is aborted (ncclCommAbort), so a
//   dead peer never leaves the worker blocked; the engine then drops it and a new handshake
//   builds a fresh one.
// - Datatypes follow vLLM's ncclDataTypeEnum.from_torch for the dtypes it maps; others (and
//   packed chunks) travel as bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>

#include "protocol/timeouts.hpp"
#include "transport/communicator.hpp"
#include "transport/nccl_unique_id.hpp"
#include "transport/rendezvous_store.hpp"

namespace hotswap::transport {

struct NcclSetup {
  NcclUniqueId unique_id{};
  int rank = 0;
  int world_size = 0;
  int device = 0;  // CUDA device index
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};
};

// NCCL's datatype enum value for a dtype (vLLM's mapping), or ncclUint8 with the element count
// scaled to bytes for a dtype NCCL has no type for. Defined in every build: the mapping is
// checked by tests on machines without NCCL, too.
struct NcclElements {
  int datatype;  // an ncclDataType_t value
  std::size_t count;
};
NcclElements nccl_elements_of(const at::Tensor& tensor);

// A fresh unique id (ncclGetUniqueId), what rank 0 of a group mints and shares.
NcclUniqueId new_nccl_unique_id();

class NcclCommunicator;

// Joins a group in vLLM's TCP mode as a rank other than 0: registers with rank 0's TCPStore,
// reads the unique id rank 0 stored under `broadcast_from/0/0`, and joins on `device`.
std::unique_ptr<NcclCommunicator> join_nccl_group_through_store(const Rendezvous& rendezvous,
                                                                int device);

class NcclCommunicator final : public Communicator {
 public:
  // Joins the group (TransferError or TimeoutError on failure). `store`, when the rendezvous
  // went through one, stays alive with the communicator, as vLLM keeps its group's.
  NcclCommunicator(const NcclSetup& setup, std::unique_ptr<RendezvousStore> store = nullptr);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return setup_.rank; }
  int world_size() const override { return setup_.world_size; }
  c10::DeviceType device_type() const override { return c10::DeviceType::CUDA; }
  void broadcast(at::Tensor& tensor, int root, std::chrono::milliseconds timeout) override;
  void all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) override;
  void queue_all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) override;
  void wait_queued(std::chrono::milliseconds timeout) override;
  void abort() override;
  RendezvousStore* store() override { return store_.get(); }

 private:
  struct Handles;
  // One deadline per call, shared by its enqueue and its wait: a call takes its timeout at most.
  using Deadline = std::chrono::steady_clock::time_point;
  // Queues a collective on the communicator's stream after the caller's current stream's work;
  // returns once NCCL has put it there (a non-blocking communicator may take a while).
  // `timeout` is what the messages name.
  template <class Enqueue>
  void enqueue(const char* what, const at::Tensor* tensor, Enqueue issue,
               std::chrono::milliseconds timeout, Deadline deadline);
  // Waits until everything on the communicator's stream has completed, or the deadline passes.
  void wait_for_stream(const char* what, std::chrono::milliseconds timeout, Deadline deadline);

  NcclSetup setup_;
  std::unique_ptr<RendezvousStore> store_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace hotswap::transport
