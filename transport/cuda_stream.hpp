// CUDA streams and events as small RAII types (GPU builds), and the stream libtorch is queueing
// this thread's work on. hotswap's own GPU work (NCCL collectives, IPC copies) runs on streams
// of its own or on libtorch's current one, never on the legacy default stream by accident:
//
// - work that reads or writes a caller's tensors is ordered after the caller's current stream
//   with an event (order_after), so a trainer that produced its tensors on a side stream is
//   read only once they are written;
// - hotswap's own streams are non-blocking, so a collective waiting on a slow peer never holds
//   back the kernels libtorch queues after it (generation keeps running during an update).
#pragma once

#ifdef HOTSWAP_WITH_CUDA
#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace hotswap::transport {

// libtorch's current stream for `device` in this thread (c10::cuda::getCurrentCUDAStream).
// Where libtorch was built without CUDA, no libtorch work reaches a GPU; the legacy default
// stream stands in.
cudaStream_t torch_current_stream(int device);

// A stream of hotswap's own on `device`, created non-blocking: it is not ordered with the legacy
// default stream, in either direction.
class CudaStream {
 public:
  explicit CudaStream(int device);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event without timing, for ordering streams and polling completion.
class CudaEvent {
 public:
  CudaEvent();
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

  void record(cudaStream_t stream);
  // true once every piece of work recorded before it has finished; throws on a device error.
  bool query() const;

 private:
  cudaEvent_t event_ = nullptr;
};

// Makes `stream` wait (on the device, not the host) for everything queued on `after` so far,
// through `event`.
void order_after(cudaStream_t stream, cudaStream_t after, CudaEvent& event);

// Tells libtorch's caching allocator that `tensor`'s memory is in use on `stream` (recordStream):
// when the caller frees it, the allocator hands it out again only once the work queued on
// `stream` so far has finished, not as soon as the caller's own stream has moved on. A no-op
// where libtorch has no CUDA (its allocator is not the one that owns the memory).
void keep_until_stream_done(const at::Tensor& tensor, cudaStream_t stream);

// Byte copy between device pointers, queued on `stream`. It is asynchronous to the host, like
// every device-to-device cudaMemcpy: the bytes are in place once `stream` has been synchronized.
void copy_device_bytes(void* destination, const void* source, std::size_t bytes,
                       cudaStream_t stream);

}  // namespace hotswap::transport
#endif
