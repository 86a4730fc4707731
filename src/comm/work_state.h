// The shared state behind a Work handle: finished by the communication thread, waited on by
// the thread that issued the op (work.cpp). Internal to src/comm.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>

#include "comm/comm.h"

namespace cadre::comm {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::exception_ptr error;
  // A NCCL op finishes on the communication thread once it is enqueued on NCCL's stream; this
  // then makes the waiting thread's current stream wait for it (nccl_group.h). Empty on CPU.
  std::function<void()> stream_wait;
  void finish(std::exception_ptr e);
};

// Marks `state` as the work item this communication thread runs, for set_stream_wait, until
// the scope ends (Impl::submit puts one around each item).
class RunningWork {
 public:
  explicit RunningWork(Work::State* state);
  ~RunningWork();
  RunningWork(const RunningWork&) = delete;
  RunningWork& operator=(const RunningWork&) = delete;
};

// Where a NCCL op leaves the stream wait for the thread that waits on its Work: on the running
// item, before it finishes (finish()'s lock hands it over to that thread). No-op outside one.
void set_stream_wait(std::function<void()> wait);

}  // namespace cadre::comm
