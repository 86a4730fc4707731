// Seconds on the monotonic clock, for deadlines and durations (never wall time, which can jump).
#pragma once

#include <chrono>

namespace cadre {

// Seconds since an arbitrary fixed point: only differences between two calls mean anything.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds from `start` until now.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace cadre
