// Namespaced test hosts (see virtual_hosts.h): a thin RAII layer over netns_hosts.sh, plus the
// signal handler that removes the namespaces when the test is interrupted.
#include "netfault/virtual_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "support/process.h"

namespace cadre::netfault {
namespace {

const char* kScript = CADRE_SOURCE_DIR "/tests/netfault/netns_hosts.sh";
const char* kPrefixBase = "cnf";  // namespaces are cnf<owner pid>-h<i> and cnf<owner pid>-sw

// Prefixes with live namespaces, readable from the signal handler (fixed storage, no allocation).
constexpr int kSlots = 8;
char g_prefixes[kSlots][32];
volatile sig_atomic_t g_used[kSlots];

// Async-signal-safe: fork, execv, waitpid, signal, raise only.
void remove_all_and_reraise(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (!g_used[i]) continue;
    pid_t pid = ::fork();
    if (pid == 0) {
      char bash[] = "/bin/bash", down[] = "down";
      char* argv[] = {bash, const_cast<char*>(kScript), down, g_prefixes[i], nullptr};
      ::execv(bash, argv);
      ::_exit(127);
    }
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_signal_cleanup() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa {};
  sa.sa_handler = remove_all_and_reraise;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(sig, &sa, nullptr);
}

void register_prefix(const std::string& prefix) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_used[i]) continue;
    std::strncpy(g_prefixes[i], prefix.c_str(), sizeof g_prefixes[i] - 1);
    g_used[i] = 1;
    return;
  }
  throw std::runtime_error("VirtualHosts: more than " + std::to_string(kSlots) + " sets of hosts alive at once");
}

void unregister_prefix(const std::string& prefix) {
  for (int i = 0; i < kSlots; ++i)
    if (g_used[i] && prefix == g_prefixes[i]) g_used[i] = 0;
}

std::string first_existing(const std::vector<std::string>& paths) {
  for (const auto& p : paths)
    if (::access(p.c_str(), X_OK) == 0) return p;
  throw std::runtime_error("none of these programs exists: " + paths.front() + " ... (install iproute2/util-linux)");
}

}  // namespace

bool VirtualHosts::have_privileges() { return ::geteuid() == 0; }

VirtualHosts::VirtualHosts(int n) : n_(n), prefix_(kPrefixBase + std::to_string(::getpid()) + "-") {
  if (!have_privileges())
    throw std::runtime_error("network-namespace hosts need root (CAP_NET_ADMIN, CAP_SYS_ADMIN); running as uid " +
                             std::to_string(::geteuid()));
  install_signal_cleanup();
  helper({"reap-stale", kPrefixBase});
  register_prefix(prefix_);
  try {
    helper({"up", prefix_, std::to_string(n)});
  } catch (...) {
    helper({"down", prefix_});
    unregister_prefix(prefix_);
    throw;
  }
}

VirtualHosts::~VirtualHosts() {
  try {
    helper({"down", prefix_});
  } catch (const std::exception& e) {
    // A destructor must not throw; say loudly what is left behind (the next run reaps it).
    std::fprintf(stderr, "VirtualHosts: cleanup of %s failed: %s\n", prefix_.c_str(), e.what());
  }
  unregister_prefix(prefix_);
}

std::string VirtualHosts::name(int host) const { return prefix_ + "h" + std::to_string(host); }

std::vector<std::string> VirtualHosts::command(int host, const std::vector<std::string>& argv,
                                               const std::vector<std::string>& env) const {
  static const std::string ip = first_existing({"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"});
  static const std::string unshare = first_existing({"/usr/bin/unshare", "/bin/unshare"});
  // A UTS namespace of its own gives the host its own hostname (agents name nodes by it).
  std::vector<std::string> out = {ip, "netns", "exec", name(host), unshare, "--uts", "--", "/bin/sh", "-c",
                                  "hostname \"$0\" && exec /usr/bin/env \"$@\"", hostname(host)};
  out.insert(out.end(), env.begin(), env.end());
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

void VirtualHosts::run_on_switch(const std::function<void()>& fn) const {
  auto open_ns = [](const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open network namespace " + path + ": " + std::strerror(errno));
    return fd;
  };
  int home = open_ns("/proc/thread-self/ns/net");
  int sw = open_ns("/var/run/netns/" + prefix_ + "sw");
  auto enter = [](int fd, const char* what) {
    if (::setns(fd, CLONE_NEWNET) != 0) throw std::runtime_error(std::string("setns into ") + what + ": " + std::strerror(errno));
  };
  try {
    enter(sw, "the switch namespace");
    fn();
  } catch (...) {
    enter(home, "this thread's own namespace");
    ::close(sw);
    ::close(home);
    throw;
  }
  enter(home, "this thread's own namespace");
  ::close(sw);
  ::close(home);
}

void VirtualHosts::cut(int host) { helper({"cut", prefix_, std::to_string(host)}); }
void VirtualHosts::heal(int host) { helper({"heal", prefix_, std::to_string(host)}); }
void VirtualHosts::kill_all(int host) { helper({"kill", prefix_, std::to_string(host)}); }

std::vector<int> VirtualHosts::pids(int host) const {
  auto r = test::run_process({"bash", kScript, "pids", prefix_, std::to_string(host)}, {}, 60);
  if (r.exit_code != 0) throw std::runtime_error("netns_hosts.sh pids " + name(host) + " failed:\n" + r.output);
  std::vector<int> out;
  std::istringstream in(r.output);
  for (int pid; in >> pid;) out.push_back(pid);
  return out;
}

void VirtualHosts::helper(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"bash", kScript};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = test::run_process(argv, {}, 60);
  if (r.exit_code != 0) {
    std::string joined;
    for (const auto& a : args) joined += " " + a;
    throw std::runtime_error("netns_hosts.sh" + joined + " failed (exit " + std::to_string(r.exit_code) + "):\n" +
                             r.output);
  }
}

}  // namespace cadre::netfault
