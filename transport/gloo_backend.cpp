#include "transport/gloo_backend.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace hotswap::transport {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const GlooBackendOptions& options) {
  auto group_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  group_options->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname(options.local_address));
  group_options->threads = options.threads;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank, options.world_size,
                                                     group_options);
}

}  // namespace hotswap::transport
