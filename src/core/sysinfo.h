// Process and machine facts read from /proc: resident memory, available memory.
#pragma once

#include <cstdint>

namespace cadre {

int64_t process_rss_bytes();       // current resident set size
int64_t process_peak_rss_bytes();  // high-water mark (VmHWM)
int64_t machine_available_bytes(); // MemAvailable

}  // namespace cadre
