// Process and machine facts read from /proc: resident memory, available memory.
#pragma once

#include <cstdint>

namespace cadre {

int64_t process_rss_bytes();       // current resident set size
int64_t process_peak_rss_bytes();  // high-water mark (VmHWM)
// Resident anonymous memory (RssAnon): what the process itself holds, without the pages of the
// files it maps (libraries), which the kernel can drop and read again under a memory limit.
int64_t process_anon_rss_bytes();
int64_t machine_available_bytes(); // MemAvailable

}  // namespace cadre
