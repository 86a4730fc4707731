// /proc readers for memory figures.
#include "core/sysinfo.h"

#include <fstream>
#include <string>

namespace cadre {
namespace {
// Reads a "Key:   123 kB" line from a /proc file; -1 when absent.
int64_t read_kb_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':')
      return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return -1;
}
}  // namespace

int64_t process_rss_bytes() { return read_kb_field("/proc/self/status", "VmRSS"); }
int64_t process_peak_rss_bytes() { return read_kb_field("/proc/self/status", "VmHWM"); }
int64_t process_anon_rss_bytes() { return read_kb_field("/proc/self/status", "RssAnon"); }
int64_t machine_available_bytes() { return read_kb_field("/proc/meminfo", "MemAvailable"); }

}  // namespace cadre
