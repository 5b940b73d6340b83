#include "model_loader/kernels/cuda_graph_recorder.hpp"

#include "protocol/errors.hpp"

#ifdef HOTSWAP_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace hotswap::model_loader::kernels {

#ifdef HOTSWAP_TORCH_HAS_CUDA
struct CudaGraphRecorder::Pool {
  at::cuda::MempoolId_t id{0, 0};  // {0, 0}: none yet; the first graph's becomes everyone's
};

namespace {

class CudaStepGraph : public StepGraph {
 public:
  explicit CudaStepGraph(std::unique_ptr<at::cuda::CUDAGraph> graph) : graph_(std::move(graph)) {}
  void replay() override { graph_->replay(); }  // on the current stream

 private:
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

}  // namespace

CudaGraphRecorder::CudaGraphRecorder(c10::Device device)
    : device_(device), pool_(std::make_unique<Pool>()) {
  if (!device.is_cuda()) {
    throw protocol::ValueError("CUDA graphs need a CUDA device, not " + device.str());
  }
}

std::unique_ptr<StepGraph> CudaGraphRecorder::capture(const std::function<void()>& step) {
  c10::cuda::CUDAGuard device_guard(device_);
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
  // Capture is not allowed on the legacy default stream; a side stream waits for the caller's
  // work (the step's inputs), and the caller waits for the side stream's at the end.
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device_.index());
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(caller);
  inputs_ready.block(side);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    step();  // the step's own run, outside the capture
    // Thread-local: another thread's CUDA calls meanwhile (a weight update's copies) neither
    // join this capture nor invalidate it.
    graph->capture_begin(pool_->id, cudaStreamCaptureModeThreadLocal);
    step();
    graph->capture_end();
  }
  if (pool_->id.first == 0 && pool_->id.second == 0) pool_->id = graph->pool();
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(caller);
  return std::make_unique<CudaStepGraph>(std::move(graph));
}
#else
struct CudaGraphRecorder::Pool {};

CudaGraphRecorder::CudaGraphRecorder(c10::Device device) : device_(device) {
  throw protocol::RuntimeError("CUDA graphs need a libtorch with CUDA; this build's has none");
}

std::unique_ptr<StepGraph> CudaGraphRecorder::capture(const std::function<void()>&) {
  throw protocol::RuntimeError("CUDA graphs need a libtorch with CUDA; this build's has none");
}
#endif

CudaGraphRecorder::~CudaGraphRecorder() = default;

}  // namespace hotswap::model_loader::kernels
