// CudaGraphRecorder: decode steps captured as libtorch's CUDA graphs (at::cuda::CUDAGraph), the
// GraphRecorder a GPU uses (decode_graph_cache.hpp). Declared in every build; in a build whose
// libtorch has no CUDA, making one is a RuntimeError.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "model_loader/kernels/decode_graph_cache.hpp"

namespace hotswap::model_loader::kernels {

class CudaGraphRecorder : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(c10::Device device);
  ~CudaGraphRecorder() override;

  // Runs `step` once on a side stream (its result is this step's, and libraries allocate their
  // workspaces outside the capture), then captures it there. Every graph of this recorder
  // shares one memory pool, as vLLM's do: a step's temporaries are reused by the next graph.
  std::unique_ptr<StepGraph> capture(const std::function<void()>& step) override;

 private:
  struct Pool;
  c10::Device device_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace hotswap::model_loader::kernels
