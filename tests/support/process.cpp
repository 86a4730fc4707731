// Process and temp-dir helpers for tests.
#include "support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/file_util.h"

namespace cadre::test {

RunResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env, double timeout_s) {
  int pipefd[2];
  if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  const pid_t test_pid = getpid();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // own group: the timeout kills the whole tree
    // A test stopped by a signal (ctest's timeout, ^C) never reaches the timeout's kill: the child
    // goes with it instead of running on (a `cadre run` keeps its workers alive).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != test_pid) _exit(127);  // the test died before the line above
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
  RunResult result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    pollfd p{pipefd[0], POLLIN, 0};
    int left_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left_ms <= 0) {
      timed_out = true;
      break;
    }
    int r = poll(&p, 1, std::min(left_ms, 1000));
    if (r < 0 && errno == EINTR) continue;
    if (r > 0) {
      ssize_t n = read(pipefd[0], buf, sizeof buf);
      if (n <= 0) break;  // EOF: the child closed its output
      result.output.append(buf, static_cast<size_t>(n));
    }
  }
  close(pipefd[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    result.output += "\n[test: killed after " + std::to_string(timeout_s) + " s]\n";
    result.exit_code = -1;
  } else {
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return result;
}

TempDir::TempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("cadre-" + tag + "-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  cadre::remove_tree(path_, ec);
}

void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

}  // namespace cadre::test
