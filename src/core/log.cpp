// Logging implementation: one line per message, written atomically to stderr.
#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/progress.h"

namespace cadre::log {
namespace {
constexpr Level kMinLevel = Level::Info;  // debug lines are compiled in but not written
std::atomic<int> g_rank{-1};

const char* level_name(Level level) {
  switch (level) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warn";
    case Level::Error: return "error";
  }
  return "?";
}
}  // namespace

void set_rank(int rank) { g_rank = rank; }

void write(Level level, const std::string& message) {
  if (static_cast<int>(level) < static_cast<int>(kMinLevel)) return;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  std::string line = std::string(stamp) + " " + level_name(level);
  if (g_rank >= 0) line += " [rank " + std::to_string(g_rank.load()) + "]";
  line += " " + message + "\n";
  // A live progress line may occupy the terminal's last row: clear it first.
  progress_clear_line();
  // One write() call so lines from concurrent ranks do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace cadre::log
