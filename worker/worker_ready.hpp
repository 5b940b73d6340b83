// The ready line a hotswap-worker prints once it serves ("hotswap-worker ready: control
// <endpoint>; ..."), read from a child started with transport::ChildProcess: how tests,
// benchmarks and tools wait for a worker they started.
#pragma once

#include <chrono>
#include <string>

#include "transport/child_process.hpp"

namespace hotswap::worker {

// Waits for `worker`'s ready line and returns its control endpoint; a RuntimeError carrying
// what the worker printed if it exits or says nothing within `timeout`.
std::string wait_until_ready(transport::ChildProcess& worker, std::chrono::milliseconds timeout);

}  // namespace hotswap::worker
