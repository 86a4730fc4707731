// Marks this worker as busy for the agent's stall detection while a long phase without
// collectives runs (loading or writing a checkpoint): the agent restarts a group whose rank shows
// no activity for --stall-timeout, and a healthy rank reading a large checkpoint must not look
// like a hung one. A stopped process (SIGSTOP) stops this thread too, so it still looks hung.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace cadre::obs {

class ProgressHeartbeat {
 public:
  explicit ProgressHeartbeat(std::chrono::milliseconds period = std::chrono::seconds(1));
  ~ProgressHeartbeat();
  ProgressHeartbeat(const ProgressHeartbeat&) = delete;
  ProgressHeartbeat& operator=(const ProgressHeartbeat&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace cadre::obs
