// The heartbeat thread of ProgressHeartbeat (see progress_heartbeat.h).
#include "obs/progress_heartbeat.h"

#include "obs/flight_recorder.h"

namespace cadre::obs {

ProgressHeartbeat::ProgressHeartbeat(std::chrono::milliseconds period) {
  flight_recorder().progressed();
  thread_ = std::thread([this, period] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, period, [this] { return done_; })) flight_recorder().progressed();
  });
}

ProgressHeartbeat::~ProgressHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
  flight_recorder().progressed();
}

}  // namespace cadre::obs
