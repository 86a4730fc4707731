// Copies worker output from pipes to per-rank log files and, prefixed "[rank N]: ", to the
// agent's console; keeps the last lines of each stream for the root-cause report. One thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/line_buffer.h"

namespace cadre::launch {

struct LogStream {
  int pipe_fd = -1;       // read end; the forwarder owns and closes it
  std::string file_path;  // per-rank log file
  std::string prefix;     // "[rank 3]: "
  int console_fd = 1;     // 1 (stdout) or 2 (stderr)
};

class LogForwarder {
 public:
  static constexpr size_t kTailLines = 20;
  static constexpr size_t kMaxLineBytes = 64 << 10;  // longer lines are split
  explicit LogForwarder(std::vector<LogStream> streams);
  ~LogForwarder();  // stop()
  // Forwards what is still buffered in the pipes, then ends the thread. Call after the writers exited.
  void stop();
  std::vector<std::string> tail(size_t stream) const;

 private:
  struct Stream {
    LogStream spec;
    int file_fd = -1;
    LineBuffer lines{kMaxLineBytes};
    std::deque<std::string> tail;
  };
  void run();
  void emit_line(Stream& s, const std::string& line);

  std::vector<Stream> streams_;
  mutable std::mutex mutex_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace cadre::launch
