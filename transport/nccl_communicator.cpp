#include "transport/nccl_communicator.hpp"

#include "protocol/errors.hpp"
#include "transport/device.hpp"

#ifdef HOTSWAP_WITH_CUDA
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "transport/cuda_check.hpp"
#include "transport/cuda_stream.hpp"
#endif

namespace hotswap::transport {

std::unique_ptr<NcclCommunicator> join_nccl_group_through_store(const Rendezvous& rendezvous,
                                                                int device) {
  if (!built_with_cuda()) throw_needs_gpu_build("NCCL communicators need");
  auto store = std::make_unique<RendezvousStore>(rendezvous);
  const NcclUniqueId id = unique_id_from_pickle(store->get(stateless_broadcast_key(0, 0)));
  return std::make_unique<NcclCommunicator>(
      NcclSetup{id, rendezvous.rank, rendezvous.world_size, device, rendezvous.timeout},
      std::move(store));
}

#ifndef HOTSWAP_WITH_CUDA

NcclUniqueId new_nccl_unique_id() {
  throw_needs_gpu_build("an NCCL unique id needs");
}

struct NcclCommunicator::Handles {};

NcclCommunicator::NcclCommunicator(const NcclSetup& setup, std::unique_ptr<RendezvousStore> store)
    : setup_(setup), store_(std::move(store)) {
  throw_needs_gpu_build("NCCL communicators need");
}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::broadcast(at::Tensor&, int, std::chrono::milliseconds) {}
void NcclCommunicator::all_reduce_sum(at::Tensor&, std::chrono::milliseconds) {}
void NcclCommunicator::queue_all_reduce_sum(at::Tensor&, std::chrono::milliseconds) {}
void NcclCommunicator::wait_queued(std::chrono::milliseconds) {}
void NcclCommunicator::abort() {}

#else
namespace {

using Clock = std::chrono::steady_clock;

// nccl_elements_of spells these numbers out so that it builds without nccl.h.
static_assert(ncclInt8 == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclInt64 == 4 &&
              ncclFloat16 == 6 && ncclFloat32 == 7 && ncclFloat64 == 8 && ncclBfloat16 == 9);

// Spins briefly (a small broadcast completes in microseconds), then sleeps in short steps.
class Backoff {
 public:
  void pause() {
    if (++polls_ < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  int polls_ = 0;
};

std::string ms(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count()) + " ms";
}

// The communicator's asynchronous state; a failure of the query itself counts as the state.
ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t queried = ncclCommGetAsyncError(comm, &state);
  return queried == ncclSuccess ? state : queried;
}

}  // namespace

NcclUniqueId new_nccl_unique_id() {
  ncclUniqueId id;
  HOTSWAP_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out{};
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

struct NcclCommunicator::Handles {
  explicit Handles(int device) : stream(device) {}

  std::mutex mutex;  // guards comm against abort() from another thread
  ncclComm_t comm = nullptr;
  // Collectives run here, non-blocking: a broadcast waiting on a slow peer must not hold back
  // the forward kernels libtorch queues on its own stream meanwhile.
  CudaStream stream;
  CudaEvent ready;        // the caller's stream, up to the call: the collective waits for it
  CudaEvent done;         // the collective's end, polled against the timeout
  CudaEvent queued_done;  // a queued all-reduce's end, which the caller's stream waits for

  bool queued = false;  // a queued all-reduce not yet waited for

  // Aborting never waits on peers, unlike ncclCommDestroy, so it is also the teardown path.
  // Returns what went wrong with the abort itself ("" when nothing did): its callers are
  // already failing, and add it to their error; the ones that cannot throw print it.
  std::string abort_locked() {
    ncclResult_t aborted = ncclSuccess;
    if (comm != nullptr) aborted = ncclCommAbort(comm);
    comm = nullptr;
    queued = false;
    if (aborted == ncclSuccess) return "";
    return std::string(" (ncclCommAbort failed too: ") + ncclGetErrorString(aborted) + ")";
  }
  ~Handles() {
    std::lock_guard lock(mutex);
    report_abort_failure(abort_locked());
  }
  static void report_abort_failure(const std::string& failure) {
    if (!failure.empty()) std::cerr << "hotswap: NCCL communicator teardown" << failure << "\n";
  }
};

NcclCommunicator::NcclCommunicator(const NcclSetup& setup, std::unique_ptr<RendezvousStore> store)
    : setup_(setup), store_(std::move(store)) {
  if (setup.world_size < 1 || setup.rank < 0 || setup.rank >= setup.world_size) {
    throw protocol::ValueError("NCCL rank " + std::to_string(setup.rank) +
                               " is outside world_size " + std::to_string(setup.world_size));
  }
  DeviceScope scope(
      cuda_device(setup.device));  // NCCL binds the communicator to the current device
  handles_ = std::make_unique<Handles>(setup.device);
  ncclUniqueId id;
  static_assert(sizeof(id.internal) == kNcclUniqueIdBytes);
  std::memcpy(id.internal, setup.unique_id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // returns at once; completion is polled below, against the timeout
  const std::string as_rank =
      "as rank " + std::to_string(setup.rank) + " of " + std::to_string(setup.world_size);
  {
    std::lock_guard lock(handles_->mutex);
    ncclResult_t started =
        ncclCommInitRankConfig(&handles_->comm, setup.world_size, id, setup.rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      // A non-blocking init may hand back a communicator even when it fails at once: it is
      // aborted here, not left to whoever holds the handles.
      const std::string abort_failure = handles_->abort_locked();
      throw protocol::TransferError("ncclCommInitRankConfig " + as_rank +
                                    " failed: " + ncclGetErrorString(started) + abort_failure);
    }
  }
  const auto deadline = Clock::now() + setup.timeout;
  Backoff backoff;
  for (;;) {
    {
      std::lock_guard lock(handles_->mutex);
      if (handles_->comm == nullptr) throw protocol::TransferError("NCCL init was aborted");
      const ncclResult_t state = async_state(handles_->comm);
      if (state != ncclInProgress && state != ncclSuccess) {
        std::string detail = ncclGetLastError(handles_->comm);
        detail += handles_->abort_locked();
        throw protocol::TransferError("NCCL init " + as_rank +
                                      " failed: " + ncclGetErrorString(state) + " " + detail);
      }
      if (state == ncclSuccess) break;
      if (Clock::now() >= deadline) {
        const std::string abort_failure = handles_->abort_locked();
        throw protocol::TimeoutError("NCCL init " + as_rank + " did not complete within " +
                                     ms(setup.timeout) + ": a peer never joined" + abort_failure);
      }
    }
    backoff.pause();
  }
  // The warm-up every vLLM communicator issues: a one-element float32 all-reduce of zero.
  float* warm = nullptr;
  HOTSWAP_CUDA_CHECK(cudaMalloc(&warm, sizeof(float)));
  std::unique_ptr<float, decltype(&cudaFree)> owned(warm, &cudaFree);
  HOTSWAP_CUDA_CHECK(cudaMemsetAsync(warm, 0, sizeof(float), handles_->stream.get()));
  const Deadline warm_deadline = Clock::now() + setup.timeout;
  enqueue(
      "warm-up all-reduce", nullptr,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(warm, warm, 1, ncclFloat32, ncclSum, comm, stream);
      },
      setup.timeout, warm_deadline);
  wait_for_stream("warm-up all-reduce", setup.timeout, warm_deadline);
}

NcclCommunicator::~NcclCommunicator() = default;

template <class Enqueue>
void NcclCommunicator::enqueue(const char* what, const at::Tensor* tensor, Enqueue issue,
                               std::chrono::milliseconds timeout, Deadline deadline) {
  DeviceScope scope(cuda_device(setup_.device));
  ncclResult_t r = ncclSuccess;
  {
    std::lock_guard lock(handles_->mutex);
    if (handles_->comm == nullptr) {
      throw protocol::TransferError(std::string("NCCL ") + what +
                                    ": the communicator was aborted; start a new handshake");
    }
    // The caller's tensors are written on its current stream (libtorch's, any of them): the
    // collective starts after that work, on the device, without a host wait.
    order_after(handles_->stream.get(), torch_current_stream(setup_.device), handles_->ready);
    if (tensor != nullptr) keep_until_stream_done(*tensor, handles_->stream.get());
    r = issue(handles_->comm, handles_->stream.get());
    if (r != ncclSuccess && r != ncclInProgress) {
      std::string detail = ncclGetLastError(handles_->comm);
      detail += handles_->abort_locked();
      throw protocol::TransferError(std::string("NCCL ") + what +
                                    " failed: " + ncclGetErrorString(r) + " " + detail);
    }
  }
  // A non-blocking communicator may answer ncclInProgress while it is still putting the
  // collective on the stream (connecting to a peer, say): whatever is queued after it, an event
  // the caller's stream waits on among them, must come after that, so this waits it out.
  Backoff backoff;
  while (r == ncclInProgress) {
    {
      std::lock_guard lock(handles_->mutex);
      if (handles_->comm == nullptr) {
        throw protocol::TransferError(std::string("NCCL ") + what + " was aborted");
      }
      r = async_state(handles_->comm);
      if (r != ncclSuccess && r != ncclInProgress) {
        std::string detail = ncclGetLastError(handles_->comm);
        detail += handles_->abort_locked();
        throw protocol::TransferError(std::string("NCCL ") + what +
                                      " failed: " + ncclGetErrorString(r) + " " + detail);
      }
      if (r == ncclInProgress && Clock::now() >= deadline) {
        const std::string abort_failure = handles_->abort_locked();
        throw protocol::TimeoutError(
            std::string("NCCL ") + what + " was not enqueued within " + ms(timeout) +
            ": a peer is gone or stuck; the communicator was aborted" + abort_failure);
      }
    }
    if (r == ncclInProgress) backoff.pause();
  }
}

void NcclCommunicator::wait_for_stream(const char* what, std::chrono::milliseconds timeout,
                                       Deadline deadline) {
  DeviceScope scope(cuda_device(setup_.device));
  bool recorded = false;
  Backoff backoff;
  for (;;) {
    {
      std::lock_guard lock(handles_->mutex);
      if (handles_->comm == nullptr) {
        throw protocol::TransferError(std::string("NCCL ") + what + " was aborted");
      }
      const ncclResult_t state = async_state(handles_->comm);
      if (state != ncclSuccess && state != ncclInProgress) {
        std::string detail = ncclGetLastError(handles_->comm);
        detail += handles_->abort_locked();
        throw protocol::TransferError(std::string("NCCL ") + what +
                                      " failed: " + ncclGetErrorString(state) + " " + detail);
      }
      // A non-blocking communicator may still be enqueueing; the event goes after it.
      if (!recorded && state == ncclSuccess) {
        handles_->done.record(handles_->stream.get());
        recorded = true;
      }
      if (recorded) {
        bool finished = false;
        try {
          finished = handles_->done.query();
        } catch (...) {
          Handles::report_abort_failure(handles_->abort_locked());
          throw;
        }
        if (finished) {
          handles_->queued = false;
          return;
        }
      }
      if (Clock::now() >= deadline) {
        const std::string abort_failure = handles_->abort_locked();
        throw protocol::TimeoutError(
            std::string("NCCL ") + what + " did not complete within " + ms(timeout) +
            ": a peer is gone or stuck; the communicator was aborted" + abort_failure);
      }
    }
    backoff.pause();
  }
}

namespace {
void check_device_tensor(const at::Tensor& tensor, const char* what, int device) {
  if (!tensor.device().is_cuda()) {
    throw protocol::ValueError(std::string("NCCL ") + what +
                               " moves GPU memory, but the tensor is on " + tensor.device().str());
  }
  if (cuda_index(tensor.device()) != device) {
    throw protocol::ValueError(std::string("NCCL ") + what +
                               ": the communicator is on cuda:" + std::to_string(device) +
                               ", but the tensor is on " + tensor.device().str());
  }
  if (!tensor.is_contiguous()) {
    throw protocol::ValueError(std::string("NCCL ") + what + " needs a contiguous tensor");
  }
}
}  // namespace

void NcclCommunicator::broadcast(at::Tensor& tensor, int root, std::chrono::milliseconds timeout) {
  if (tensor.numel() == 0) return;  // every rank skips it alike: sizes come from metadata
  check_device_tensor(tensor, "broadcast", setup_.device);
  const NcclElements e = nccl_elements_of(tensor);
  void* data = tensor.data_ptr();
  const Deadline deadline = Clock::now() + timeout;
  enqueue(
      "broadcast", &tensor,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclBroadcast(data, data, e.count, static_cast<ncclDataType_t>(e.datatype), root,
                             comm, stream);
      },
      timeout, deadline);
  wait_for_stream("broadcast", timeout, deadline);
}

void NcclCommunicator::all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) {
  const Deadline deadline = Clock::now() + timeout;  // the enqueue's and the wait's together
  queue_all_reduce_sum(tensor, timeout);
  wait_for_stream("all-reduce", timeout, deadline);
}

void NcclCommunicator::queue_all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) {
  check_device_tensor(tensor, "all-reduce", setup_.device);
  const NcclElements e = nccl_elements_of(tensor);
  void* data = tensor.data_ptr();
  const Deadline deadline = Clock::now() + timeout;
  enqueue(
      "all-reduce", &tensor,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(data, data, e.count, static_cast<ncclDataType_t>(e.datatype), ncclSum,
                             comm, stream);
      },
      timeout, deadline);
  // The caller's next kernels read the sum: its stream waits for it, on the device.
  std::lock_guard lock(handles_->mutex);
  DeviceScope scope(cuda_device(setup_.device));
  order_after(torch_current_stream(setup_.device), handles_->stream.get(), handles_->queued_done);
  handles_->queued = true;
}

void NcclCommunicator::wait_queued(std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(handles_->mutex);
    if (!handles_->queued) return;
  }
  wait_for_stream("all-reduce", timeout, Clock::now() + timeout);
}

void NcclCommunicator::abort() {
  std::lock_guard lock(handles_->mutex);
  Handles::report_abort_failure(handles_->abort_locked());
}

#endif

}  // namespace hotswap::transport
