// A server process for tests: spawn, watch its output, signal, reap.
#include "support/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace cadre::test {

ServerProcess::ServerProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  int pipefd[2];
  if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(pipefd[1], STDOUT_FILENO);
    dup2(pipefd[1], STDERR_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    for (const auto& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(pipefd[1]);
  out_ = pipefd[0];
  reader_ = std::thread([this] {
    char buf[4096];
    for (;;) {
      ssize_t n = read(out_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      std::lock_guard<std::mutex> lock(mutex_);
      output_.append(buf, static_cast<size_t>(n));
    }
  });
}

ServerProcess::~ServerProcess() {
  // The group is killed only while its leader is unreaped, so the id cannot belong to
  // anyone else yet.
  if (!reaped_) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (reader_.joinable()) reader_.join();
  close(out_);
}

std::string ServerProcess::wait_for(const std::string& text, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const size_t at = output_.find(text);
      if (at != std::string::npos) {
        const size_t end = output_.find('\n', at);
        if (end != std::string::npos) return output_.substr(at + text.size(), end - at - text.size());
      }
    }
    if (!reaped_ && waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    if (reaped_) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

void ServerProcess::signal(int sig) { kill(pid_, sig); }

int ServerProcess::wait_exit(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!reaped_) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

std::string ServerProcess::output() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return output_;
}

}  // namespace cadre::test
