// make_gloo_backend: torch's ProcessGroupGloo behind c10d's backend interface.
//
// The one place that includes torch's c10d/ProcessGroupGloo.hpp, and so gloo's headers. PyPI's
// torch ships no gloo headers; Debian's libgloo-dev provides them, from an older gloo than the
// one torch was built with. This file needs gloo's names only: every gloo object is made and
// used inside libtorch (the backend's constructor, createDeviceForHostname), and callers see
// c10d::Backend alone. tests/check_gloo_isolation.sh proves it on every build: this object file
// defines no gloo code of its own, so no gloo code from the other version reaches a binary.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace hotswap::transport {

struct GlooBackendOptions {
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{0};
  std::string local_address;  // the interface this rank's gloo device binds
  int threads = 2;
};

// Joins a gloo process group over `store`; blocks until every rank has joined or the timeout
// passes (torch's errors pass through).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const GlooBackendOptions& options);

}  // namespace hotswap::transport
