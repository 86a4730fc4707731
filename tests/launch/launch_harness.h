// Test helpers for multi-agent launcher tests: temp dirs, agent processes that are always killed
// and reaped, waiting for conditions with a deadline, and finding processes by a marker string
// in their command line (to prove nothing was left behind).
#pragma once

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/file_util.h"

namespace launch_test {

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cadre-launch-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    cadre::remove_tree(path, ignored);
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Polls cond every 20 ms until it holds or timeout_s passes; returns whether it held.
inline bool wait_until(const std::function<bool()>& cond, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Live (non-zombie) processes whose command line contains marker, this process excluded.
inline std::vector<pid_t> pids_with_marker(const std::string& marker) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* e = ::readdir(proc)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    auto paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find(marker) != std::string::npos) out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

// Kills every process carrying the marker when the test ends, however it ends.
struct MarkerReaper {
  std::string marker;
  ~MarkerReaper() {
    for (pid_t pid : pids_with_marker(marker)) ::kill(pid, SIGKILL);
  }
};

// A child process (an agent) in its own process group, output to a file; killed and reaped
// when the object goes away unless it already exited.
class Proc {
 public:
  Proc(const std::vector<std::string>& argv, const std::string& output_path) : output_path_(output_path) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;
  ~Proc() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) { ::kill(pid_, sig); }
  // True once the process exited (reaps it); waits up to timeout_s.
  bool wait_exit(double timeout_s) {
    return wait_until([&] {
      if (reaped_) return true;
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
      return reaped_;
    }, timeout_s);
  }
  // Exit code, or 128+signal when killed by a signal, or -1 while running.
  int exit_code() const {
    if (!reaped_) return -1;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    return 128 + WTERMSIG(status_);
  }
  std::string output() const { return read_file(output_path_); }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::string output_path_;
};

}  // namespace launch_test
