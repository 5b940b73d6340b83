// A thread's intra-op team: the OpenMP threads that libtorch's parallel loops (and MKL's and
// oneDNN's, which share them) start for a thread on the first parallel region it runs, and keep
// until that thread ends.
//
// libgomp counts the threads of every thread's team, and once the count passes the number of
// CPUs, every team's threads spin only about 100 times (instead of about 300,000) before they
// sleep between two parallel regions. The stepping thread's helper then sleeps after every
// region and each next region waits for it to be woken. A worker that had loaded its model on
// its main thread (or applied an update on a control thread) kept a second team for good: on two
// cores, under 64 bfloat16 streams, a fifth of the machine's time went idle in those waits
// (vmstat), and the served throughput rose from 6.0–6.2 to 6.2–7.7 thousand tokens/s once the
// loading thread let its team go. So every thread but the one that steps the model lets its
// team go once its parallel work is done.
#pragma once

namespace hotswap::model_loader {

// Ends the calling thread's team, if it has one (its helper threads exit; a later parallel
// region on this thread starts a new one). Call it outside any parallel region; without one,
// or outside libgomp, it does nothing.
void release_intra_op_team();

// Calls release_intra_op_team() when the scope ends, however it ends (a control call that
// threw).
class IntraOpTeamRelease {
 public:
  IntraOpTeamRelease() = default;
  ~IntraOpTeamRelease() { release_intra_op_team(); }
  IntraOpTeamRelease(const IntraOpTeamRelease&) = delete;
  IntraOpTeamRelease& operator=(const IntraOpTeamRelease&) = delete;
};

}  // namespace hotswap::model_loader
