// Several test "hosts" on one machine: one network namespace per host, each with its own address
// (10.77.0.10, .11, ...) on a bridge that lives in a private switch namespace, so nothing is added
// to the root namespace and parallel test runs cannot collide. Faults: cut a host's switch port
// (its packets vanish silently), heal it, or SIGKILL everything running inside a host.
//
// Cleanup is guaranteed: the destructor kills every process inside the namespaces and deletes
// them (veths and the bridge go with them); SIGINT/SIGTERM/SIGHUP/SIGQUIT run the same removal from
// the signal handler (fork + exec of the helper script only); and the constructor first removes
// leftovers of earlier runs whose owning process is gone (a SIGKILLed test). The work is done by
// tests/netfault/netns_hosts.sh, which can also be run by hand.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cadre::netfault {

class VirtualHosts {
 public:
  // Creates n hosts. Throws std::runtime_error with the helper's output when anything fails,
  // or saying that root is needed.
  explicit VirtualHosts(int n);
  ~VirtualHosts();
  VirtualHosts(const VirtualHosts&) = delete;
  VirtualHosts& operator=(const VirtualHosts&) = delete;

  int size() const { return n_; }
  std::string name(int host) const;  // namespace name, e.g. cnf4711-h2
  std::string hostname(int host) const { return "h" + std::to_string(host); }
  std::string address(int host) const { return "10.77.0." + std::to_string(10 + host); }

  // argv run inside host `host` (own network and UTS namespace, hostname "h<i>"), with extra
  // environment entries "K=V". Give the result to a process launcher (argv[0] is absolute).
  std::vector<std::string> command(int host, const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env = {}) const;

  // The switch answers at this address: run services that belong to no host there (etcd).
  std::string switch_address() const { return "10.77.0.1"; }
  // Runs fn with this thread in the switch's network namespace, then moves it back: processes
  // fn starts live on the switch, sockets fn opens reach the hosts. Call from the main thread
  // when fn starts children that use PR_SET_PDEATHSIG (it follows the forking thread).
  void run_on_switch(const std::function<void()>& fn) const;

  void cut(int host);   // the host's switch port goes down: no packet in or out, no error seen
  void heal(int host);  // the port comes back
  void kill_all(int host);  // SIGKILL every process inside the host (a crashed machine)
  std::vector<int> pids(int host) const;  // processes inside the host now

  // True when root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN).
  static bool have_privileges();

 private:
  void helper(const std::vector<std::string>& args) const;

  int n_;
  std::string prefix_;  // cnf<pid>-
};

}  // namespace cadre::netfault
