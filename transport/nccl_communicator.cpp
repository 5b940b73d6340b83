#include "transport/nccl_communicator.hpp"

#include <cstring>
#include <mutex>
#include <thread>

#include "protocol/errors.hpp"
#include "transport/cuda_check.hpp"

namespace hotswap::transport {
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

}  // namespace

NcclUniqueId new_nccl_unique_id() {
  ncclUniqueId id;
  HOTSWAP_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out{};
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

struct NcclCommunicator::Handles {
  std::mutex mutex;  // guards comm against abort() from another thread
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;

  // Aborting never waits on peers, unlike ncclCommDestroy, so it is also the teardown path.
  void abort_locked() {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }
  ~Handles() {
    std::lock_guard lock(mutex);
    abort_locked();
    if (done != nullptr) cudaEventDestroy(done);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

NcclCommunicator::NcclCommunicator(const NcclSetup& setup, std::unique_ptr<RendezvousStore> store)
    : setup_(setup), store_(std::move(store)), handles_(std::make_unique<Handles>()) {
  if (setup.world_size < 1 || setup.rank < 0 || setup.rank >= setup.world_size) {
    throw protocol::ValueError("NCCL rank " + std::to_string(setup.rank) +
                               " is outside world_size " + std::to_string(setup.world_size));
  }
  HOTSWAP_CUDA_CHECK(cudaSetDevice(setup.device));
  ncclUniqueId id;
  static_assert(sizeof(id.internal) == kNcclUniqueIdBytes);
  std::memcpy(id.internal, setup.unique_id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // returns at once; completion is polled below, against the timeout
  {
    std::lock_guard lock(handles_->mutex);
    HOTSWAP_NCCL_CHECK(
        ncclCommInitRankConfig(&handles_->comm, setup.world_size, id, setup.rank, &config));
  }
  const auto deadline = Clock::now() + setup.timeout;
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard lock(handles_->mutex);
      if (handles_->comm == nullptr) throw protocol::TransferError("NCCL init was aborted");
      ncclCommGetAsyncError(handles_->comm, &state);
      if (state != ncclInProgress && state != ncclSuccess) {
        std::string detail = ncclGetLastError(handles_->comm);
        handles_->abort_locked();
        throw protocol::TransferError("NCCL init as rank " + std::to_string(setup.rank) + " of " +
                                      std::to_string(setup.world_size) +
                                      " failed: " + ncclGetErrorString(state) + " " + detail);
      }
      if (state == ncclSuccess) break;
      if (Clock::now() >= deadline) {
        handles_->abort_locked();
        throw protocol::TimeoutError("NCCL init as rank " + std::to_string(setup.rank) + " of " +
                                     std::to_string(setup.world_size) +
                                     " did not complete within " + ms(setup.timeout) +
                                     ": a peer never joined");
      }
    }
    backoff.pause();
  }
  HOTSWAP_CUDA_CHECK(cudaStreamCreate(&handles_->stream));  // ordered with the legacy stream
  HOTSWAP_CUDA_CHECK(cudaEventCreateWithFlags(&handles_->done, cudaEventDisableTiming));

  // The warm-up every vLLM communicator issues: a one-element float32 all-reduce of zero.
  float* warm = nullptr;
  HOTSWAP_CUDA_CHECK(cudaMalloc(&warm, sizeof(float)));
  std::unique_ptr<float, decltype(&cudaFree)> owned(warm, &cudaFree);
  HOTSWAP_CUDA_CHECK(cudaMemsetAsync(warm, 0, sizeof(float), handles_->stream));
  run(
      "warm-up all-reduce",
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(warm, warm, 1, ncclFloat32, ncclSum, comm, stream);
      },
      setup.timeout);
}

NcclCommunicator::~NcclCommunicator() = default;

template <class Enqueue>
void NcclCommunicator::run(const char* what, Enqueue enqueue, std::chrono::milliseconds timeout) {
  HOTSWAP_CUDA_CHECK(cudaSetDevice(setup_.device));
  const auto deadline = Clock::now() + timeout;
  {
    std::lock_guard lock(handles_->mutex);
    if (handles_->comm == nullptr) {
      throw protocol::TransferError(std::string("NCCL ") + what +
                                    ": the communicator was aborted; start a new handshake");
    }
    ncclResult_t r = enqueue(handles_->comm, handles_->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      std::string detail = ncclGetLastError(handles_->comm);
      handles_->abort_locked();
      throw protocol::TransferError(std::string("NCCL ") + what +
                                    " failed: " + ncclGetErrorString(r) + " " + detail);
    }
  }
  bool recorded = false;
  Backoff backoff;
  for (;;) {
    {
      std::lock_guard lock(handles_->mutex);
      if (handles_->comm == nullptr) {
        throw protocol::TransferError(std::string("NCCL ") + what + " was aborted");
      }
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(handles_->comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        std::string detail = ncclGetLastError(handles_->comm);
        handles_->abort_locked();
        throw protocol::TransferError(std::string("NCCL ") + what +
                                      " failed: " + ncclGetErrorString(state) + " " + detail);
      }
      // A non-blocking communicator may still be enqueueing; the event goes after it.
      if (!recorded && state == ncclSuccess) {
        HOTSWAP_CUDA_CHECK(cudaEventRecord(handles_->done, handles_->stream));
        recorded = true;
      }
      if (recorded) {
        cudaError_t query = cudaEventQuery(handles_->done);
        if (query == cudaSuccess) return;
        if (query != cudaErrorNotReady) {
          handles_->abort_locked();
          HOTSWAP_CUDA_CHECK(query);
        }
      }
      if (Clock::now() >= deadline) {
        handles_->abort_locked();
        throw protocol::TimeoutError(std::string("NCCL ") + what + " did not complete within " +
                                     ms(timeout) +
                                     ": a peer is gone or stuck; the communicator was aborted");
      }
    }
    backoff.pause();
  }
}

namespace {
void check_device_tensor(const at::Tensor& tensor, const char* what) {
  if (!tensor.device().is_cuda()) {
    throw protocol::ValueError(std::string("NCCL ") + what +
                               " moves GPU memory, but the tensor is on " + tensor.device().str());
  }
  if (!tensor.is_contiguous()) {
    throw protocol::ValueError(std::string("NCCL ") + what + " needs a contiguous tensor");
  }
}
}  // namespace

void NcclCommunicator::broadcast(at::Tensor& tensor, int root, std::chrono::milliseconds timeout) {
  if (tensor.numel() == 0) return;  // every rank skips it alike: sizes come from metadata
  check_device_tensor(tensor, "broadcast");
  const NcclElements e = nccl_elements_of(tensor);
  void* data = tensor.data_ptr();
  run(
      "broadcast",
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclBroadcast(data, data, e.count, static_cast<ncclDataType_t>(e.datatype), root,
                             comm, stream);
      },
      timeout);
}

void NcclCommunicator::all_reduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) {
  check_device_tensor(tensor, "all-reduce");
  const NcclElements e = nccl_elements_of(tensor);
  void* data = tensor.data_ptr();
  run(
      "all-reduce",
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(data, data, e.count, static_cast<ncclDataType_t>(e.datatype), ncclSum,
                             comm, stream);
      },
      timeout);
}

void NcclCommunicator::abort() {
  std::lock_guard lock(handles_->mutex);
  handles_->abort_locked();
}

}  // namespace hotswap::transport
