// RankCollectives: the groups the rank processes of one tensor-parallel worker share.
//
// A gloo group always forms first, on loopback (rank 0 hosts its TCPStore). On the CPU the
// model's all-reduces run over it. On GPUs the ranks then form an NCCL communicator over the
// same ranks, rank 0 handing the others its unique id through the gloo group's store, and the
// model's all-reduces run over NCCL on the device, as vLLM's tensor-parallel groups do, instead
// of through host memory.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "transport/communicator.hpp"
#include "transport/rendezvous_store.hpp"

namespace hotswap::worker {

class RankCollectives {
 public:
  // Blocks until every rank has joined (TimeoutError or TransferError after the rendezvous's
  // timeout). `device` is this rank's model device: NCCL joins on it when it is a GPU.
  RankCollectives(const transport::Rendezvous& rendezvous, const c10::Device& device);

  // What the model's all-reduces run over: NCCL on GPUs, gloo on the CPU.
  std::shared_ptr<transport::Communicator> for_model() const { return nccl_ ? nccl_ : gloo_; }
  // Makes every blocked or later collective of either group fail promptly (a rank died).
  void abort();

 private:
  std::shared_ptr<transport::Communicator> gloo_;
  std::shared_ptr<transport::Communicator> nccl_;
};

}  // namespace hotswap::worker
