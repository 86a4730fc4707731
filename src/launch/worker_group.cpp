// Worker process supervision (see worker_group.h).
#include "launch/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "launch/child_wait.h"

extern char** environ;

namespace cadre::launch {
namespace {

// A socket pair for one worker's membership channel: both descriptors close-on-exec and at 10 or
// above (never one the child's dup2s onto 1..4 would overwrite first); the agent's end does not
// block.
void channel_pair(int pair[2]) {
  int raw[2];
  CADRE_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, raw) == 0, "socketpair: ", std::strerror(errno));
  for (int i = 0; i < 2; ++i) {
    pair[i] = ::fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
    const int err = errno;
    ::close(raw[i]);
    CADRE_CHECK(pair[i] >= 0, "fcntl(F_DUPFD_CLOEXEC): ", std::strerror(err));
  }
  ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
}

bool is_executable(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// NAME=value strings: the agent's environment with `overrides` replacing or adding entries.
std::vector<std::string> build_env(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : overrides) replaced |= k == name;
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string WorkerExit::describe() const {
  if (signal) {
    const char* name = sigabbrev_np(signal);
    return str("signal ", signal, name ? str(" (SIG", name, ")") : "");
  }
  return str("exit code ", exit_code);
}

std::string program_resolve(const std::string& program) {
  CADRE_CONFIG_CHECK(!program.empty(), "empty program name");
  if (program.find('/') != std::string::npos) {
    CADRE_CONFIG_CHECK(is_executable(program), "program '", program, "' is not an executable file");
    return program;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    start = colon == std::string::npos ? dirs.size() + 1 : colon + 1;
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable(candidate)) return candidate;
  }
  if (program == "cadre") {
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) return std::string(self, static_cast<size_t>(n));
  }
  throw ConfigError(str("program '", program, "' not found in PATH"));
}

WorkerGroup::WorkerGroup(const std::vector<std::string>& argv, std::vector<WorkerSpec> workers,
                         ProcessGroupGuard* guard, int inherited_fd, bool channels)
    : specs_(std::move(workers)), guard_(guard) {
  std::vector<LogStream> streams;
  pid_t agent = ::getpid();
  for (const auto& spec : specs_) {
    int out[2], err[2];
    CADRE_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
    int channel[2] = {-1, -1};  // [agent's end, worker's end], both above the descriptors dup2'ed below
    if (channels) channel_pair(channel);
    // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
    std::vector<std::string> args = argv, env = build_env(spec.env);
    std::vector<char*> c_args = c_strings(args), c_env = c_strings(env);
    pid_t pid = ::fork();
    CADRE_CHECK(pid >= 0, "fork for local rank ", spec.local_rank, ": ", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);     // the agent died (even by SIGKILL): so do we
      if (::getppid() != agent) ::_exit(1);   // it died before prctl took effect
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      if (inherited_fd == kInheritedFd) {
        ::fcntl(kInheritedFd, F_SETFD, 0);  // dup2 onto itself would leave close-on-exec set
      } else if (inherited_fd >= 0) {
        ::dup2(inherited_fd, kInheritedFd);
      }
      if (channel[1] >= 0) ::dup2(channel[1], kChannelFd);
      if (inherited_fd < 0) ::close(kInheritedFd);  // no secret to pass: not whatever the agent holds there
      ::close_range(channel[1] >= 0 ? kChannelFd + 1 : kInheritedFd + 1, ~0U, 0);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);  // the agent ignores it; an ignored disposition survives exec
      ::execve(c_args[0], c_args.data(), c_env.data());
      const char msg[] = "cadre run: exec failed\n";
      ssize_t ignored = ::write(2, msg, sizeof msg - 1);
      (void)ignored;
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent, so it holds before we might signal the group
    ::close(out[1]);
    ::close(err[1]);
    if (channels) {
      ::close(channel[1]);
      channels_.push_back(channel[0]);
      channel_readers_.emplace_back(channel[0]);
    }
    pids_.push_back(pid);
    running_.push_back(true);
    if (guard_) guard_->add(pid);
    std::string prefix = str("[rank ", spec.global_rank, "]: ");
    streams.push_back({out[0], spec.stdout_path, prefix, 1});
    streams.push_back({err[0], spec.stderr_path, prefix, 2});
  }
  logs_ = std::make_unique<LogForwarder>(std::move(streams));
}

WorkerGroup::~WorkerGroup() {
  bool any = false;
  for (bool r : running_) any |= r;
  if (any) stop(SIGKILL, 0);
  // Whatever else happened, the process groups must be gone: SIGKILL them (no-op when empty).
  for (pid_t pid : pids_) {
    ::killpg(pid, SIGKILL);
    if (guard_) guard_->remove(pid);
  }
  for (int fd : channels_) ::close(fd);
  // Orphans that left the groups come back to us (child subreaper) and are reaped here.
  while (waitpid_retrying(-1, nullptr, WNOHANG) > 0) {
  }
}

bool WorkerGroup::reap_one(size_t i, bool block) {
  if (!running_[i]) return true;
  int status = 0;
  pid_t r = waitpid_retrying(pids_[i], &status, block ? 0 : WNOHANG);
  if (r == 0) return false;
  WorkerExit e;
  e.local_rank = specs_[i].local_rank;
  e.global_rank = specs_[i].global_rank;
  e.pid = pids_[i];
  if (r < 0) {
    e.exit_code = -1;  // not our child any more (should not happen): treat as failed
  } else if (WIFEXITED(status)) {
    e.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  }
  running_[i] = false;
  exits_.push_back(e);
  if (e.failed() && !first_failure_) first_failure_ = std::make_unique<WorkerExit>(e);
  return true;
}

WorkerGroup::State WorkerGroup::poll() {
  bool all_done = true;
  for (size_t i = 0; i < pids_.size(); ++i) all_done &= reap_one(i, false);
  if (first_failure_) return State::Failed;
  return all_done ? State::Succeeded : State::Running;
}

const WorkerExit* WorkerGroup::first_failure() const { return first_failure_.get(); }

void WorkerGroup::stop(int signal, double grace_s) {
  for (size_t i = 0; i < pids_.size(); ++i)
    if (running_[i]) ::killpg(pids_[i], signal);
  double deadline = now_s() + grace_s;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < pids_.size(); ++i) all &= reap_one(i, false);
    if (all || now_s() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // SIGKILL what is left of every group (leaders that exited may have left children behind),
  // then reap: the agent is a child subreaper, so orphaned grandchildren come back to it.
  for (size_t i = 0; i < pids_.size(); ++i) {
    ::killpg(pids_[i], SIGKILL);
    reap_one(i, true);
    while (waitpid_retrying(-pids_[i], nullptr, WNOHANG) > 0) {
    }
    if (guard_) guard_->remove(pids_[i]);
  }
  logs_->stop();
}

bool WorkerGroup::send_line(int64_t local_rank, const std::string& line) {
  if (channels_.empty() || !running(local_rank)) return false;
  // A line is a few hundred bytes: it fits the socket's buffer in one piece.
  const ssize_t n = ::send(channels_[size_t(local_rank)], line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return n == static_cast<ssize_t>(line.size());
}

std::vector<std::string> WorkerGroup::read_lines() {
  std::vector<std::string> lines;
  for (auto& reader : channel_readers_)
    for (auto& line : reader.read_available())
      if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

void WorkerGroup::respecify(int64_t local_rank, WorkerSpec spec) { specs_[size_t(local_rank)] = std::move(spec); }

std::vector<std::string> WorkerGroup::stderr_tail(int64_t local_rank) const {
  for (size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].local_rank == local_rank) return logs_->tail(2 * i + 1);
  return {};
}

}  // namespace cadre::launch
