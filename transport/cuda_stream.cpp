#include "transport/cuda_stream.hpp"

#ifdef HOTSWAP_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "transport/cuda_check.hpp"
#include "transport/device.hpp"

namespace hotswap::transport {

cudaStream_t torch_current_stream(int device) {
#ifdef HOTSWAP_TORCH_HAS_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return cudaStreamLegacy;
#endif
}

CudaStream::CudaStream(int device) {
  DeviceScope scope(cuda_device(device));
  HOTSWAP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

CudaEvent::CudaEvent() {
  HOTSWAP_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

void CudaEvent::record(cudaStream_t stream) {
  HOTSWAP_CUDA_CHECK(cudaEventRecord(event_, stream));
}

bool CudaEvent::query() const {
  cudaError_t state = cudaEventQuery(event_);
  if (state == cudaErrorNotReady) return false;
  HOTSWAP_CUDA_CHECK(state);
  return true;
}

void order_after(cudaStream_t stream, cudaStream_t after, CudaEvent& event) {
  event.record(after);
  HOTSWAP_CUDA_CHECK(cudaStreamWaitEvent(stream, event.get(), 0));
}

void keep_until_stream_done(const at::Tensor& tensor, cudaStream_t stream) {
#ifdef HOTSWAP_TORCH_HAS_CUDA
  if (!tensor.is_cuda() || !tensor.has_storage()) return;
  const auto device = tensor.device().index();
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(),
                                                c10::cuda::getStreamFromExternal(stream, device));
#else
  (void)tensor;
  (void)stream;
#endif
}

void copy_device_bytes(void* destination, const void* source, std::size_t bytes,
                       cudaStream_t stream) {
  if (bytes == 0) return;
  HOTSWAP_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace hotswap::transport
