// Where a training step's time goes: compute, communication wait and data wait. The
// communicator adds every blocking wait of a thread to that thread's comm-wait clock
// (comm_wait_add, from Work::wait); the trainer times its data reads; compute is the rest.
#pragma once

#include <chrono>

namespace cadre::obs {

// Adds to this thread's time blocked on collectives (Work::wait calls it); StepTimer reads it.
void comm_wait_add(double seconds);

struct StepSplit {
  double total_s = 0, compute_s = 0, comm_wait_s = 0, data_wait_s = 0;
};

// One step on the calling thread: start(), data reads inside data(), then split() at any point.
class StepTimer {
 public:
  void start();
  // Runs fn (a data read) and counts its time as data wait.
  template <typename Fn>
  auto data(Fn&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    struct Add {
      StepTimer* self;
      std::chrono::steady_clock::time_point t0;
      ~Add() { self->data_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
    } add{this, t0};
    return fn();
  }
  // The split of the time since start().
  StepSplit split() const;

 private:
  std::chrono::steady_clock::time_point start_;
  double comm_at_start_ = 0, data_wait_s_ = 0;
};

}  // namespace cadre::obs
