// Timeouts, decided once. kDefaultTimeout bounds every wait for a peer that a caller does not
// bound itself: a transfer, a control call, a rendezvous, a collective between tensor-parallel
// ranks, a worker coming up. One value on both sides of the wire (the worker's --timeout,
// hotswap-trainer's --timeout, every init info's `timeout`, the Python bindings' defaults), so
// a trainer and a worker left at their defaults give up together. Five minutes: a checkpoint of
// tens of gigabytes over a slow plane, or a rank still loading its model, must not time out.
#pragma once

#include <chrono>

namespace hotswap::protocol {

inline constexpr std::chrono::seconds kDefaultTimeout{300};
// The same in seconds, for command-line flags and Python defaults.
inline constexpr double kDefaultTimeoutSeconds = static_cast<double>(kDefaultTimeout.count());

// A timeout given in seconds (a flag, a JSON field, a Python float), as the waits take it:
// whole milliseconds, rounded down. The caller has checked that it is finite and positive.
inline std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

}  // namespace hotswap::protocol
