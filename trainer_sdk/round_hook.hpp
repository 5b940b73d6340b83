// Points of a trainer's round where a test can stop it on purpose. c10d's lesson: inject faults
// through hooks the code passes anyway, not through sleeps that race. The sender of every built-in
// engine reaches these, in this order, each once per round (kInit once, inside trainer_init).
// kStarted and kBeforeFinish are the base engine's (TrainerWeightTransferEngine::run_round), so
// no engine can miss them; kMidUpdate is reached where an engine's transfer says its bytes
// began to move, and kInit where its trainer_init waits for the handshake.
//
//   kInit         the workers have been asked to init_weight_transfer_engine, the handshake is
//                 not complete (its reply, or the data plane's rendezvous, is still ahead)
//   kStarted      start_weight_update returned; nothing sent yet
//   kMidUpdate    update_weights is in flight and part of the bytes has been sent
//   kBeforeFinish update_weights returned; finish_weight_update not called yet
//
// The hook is process-wide and runs on the sending thread; with none set, reaching a point
// costs a load of a pointer. hotswap-trainer's --fault-at uses it to SIGKILL or SIGSTOP itself.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

namespace hotswap::trainer_sdk {

enum class RoundPoint { kInit, kStarted, kMidUpdate, kBeforeFinish };

// "init", "start", "update", "finish": the names hotswap-trainer's --fault-at takes.
std::string_view round_point_name(RoundPoint point);
std::optional<RoundPoint> round_point_from_name(std::string_view name);

using RoundHook = std::function<void(RoundPoint)>;
// Installs `hook` (empty: none). Not thread-safe against engines running: set it before.
void set_round_hook(RoundHook hook);
// What engines call at each point.
void reach(RoundPoint point);

}  // namespace hotswap::trainer_sdk
