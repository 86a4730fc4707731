// An agent's liveness port: a TCP listener whose only job is to exist while the agent's process
// does. A peer that connects and is refused knows that process is gone: its host answered, and
// nothing listens there any more (the kernel closes a process's sockets as it dies, SIGKILL
// included). That is known at once, where a lease (etcd) or a heartbeat only tells after its
// deadline. A connection accepted means the agent lives; no answer (a cut link, a host that is
// down, a firewall dropping packets) tells nothing, and the deadlines decide as before.
#pragma once

#include <cstdint>
#include <string>
#include <thread>

namespace cadre::rdzv {

class LivenessPort {
 public:
  // Listens on addr, any free port; accepted connections are closed at once. Throws Error naming
  // addr when it cannot listen there.
  explicit LivenessPort(const std::string& addr);
  ~LivenessPort();
  LivenessPort(const LivenessPort&) = delete;
  LivenessPort& operator=(const LivenessPort&) = delete;
  uint16_t port() const { return port_; }

 private:
  void accept_until_closed();
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
};

enum class Liveness {
  kListening,  // the connection was accepted: the process lives
  kRefused,    // the host answered that nothing listens: the process is gone
  kNoAnswer,   // nothing came back within the timeout, or the network said the host is unreachable
};

// Connects to addr:port once, waiting at most timeout_s.
Liveness probe_liveness(const std::string& addr, uint16_t port, double timeout_s);

const char* liveness_name(Liveness l);

}  // namespace cadre::rdzv
