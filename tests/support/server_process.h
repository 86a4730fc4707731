// Test helper: a long-running program (a server) started in its own process group, whose
// output is collected by a thread; waits for a line announcing it is ready, signals it, waits
// for its exit with a deadline. The destructor kills and reaps the group, so a failing test
// leaves nothing behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cadre::test {

class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Waits until the output holds `text`; returns the rest of that line ("" on timeout or exit).
  std::string wait_for(const std::string& text, double timeout_s);
  void signal(int sig);
  // Exit code (128 + signal when killed by one), or -1 if it did not exit in time.
  int wait_exit(double timeout_s);
  std::string output() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  mutable std::mutex mutex_;
  std::string output_;
  std::thread reader_;
};

}  // namespace cadre::test
