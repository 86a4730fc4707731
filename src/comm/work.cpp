// Work handles: waiting for an op the communication thread runs, and the thread's note of which
// op it is running (work_state.h).
#include "comm/work_state.h"

#include <chrono>

#include "obs/step_timer.h"

namespace cadre::comm {

namespace {
thread_local Work::State* running_work = nullptr;
}  // namespace

void Work::State::finish(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu);
  finished = true;
  error = e;
  cv.notify_all();
}

RunningWork::RunningWork(Work::State* state) { running_work = state; }
RunningWork::~RunningWork() { running_work = nullptr; }

void set_stream_wait(std::function<void()> wait) {
  if (running_work) running_work->stream_wait = std::move(wait);
}

void Work::wait() {
  if (!state_) return;  // an empty handle stands for work that finished synchronously
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->finished) {
    // Time blocked here is the calling thread's communication wait (a step's time split).
    const auto t0 = std::chrono::steady_clock::now();
    state_->cv.wait(lock, [&] { return state_->finished; });
    obs::comm_wait_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (state_->error) std::rethrow_exception(state_->error);
  if (state_->stream_wait) {
    auto stream_wait = std::move(state_->stream_wait);
    state_->stream_wait = nullptr;
    lock.unlock();
    stream_wait();
  }
}

bool Work::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->finished;
}

}  // namespace cadre::comm
