// The agent's liveness port and its probe (see liveness_port.h).
#include "rdzv/liveness_port.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/ipv4_address.h"

namespace cadre::rdzv {

LivenessPort::LivenessPort(const std::string& addr) {
  sockaddr_in sa = resolve_ipv4(addr, 0);
  // Close-on-exec: a worker that inherited it would keep the port open after the agent died.
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CADRE_CHECK(fd_ >= 0, "liveness port on ", addr, ": socket(): ", std::strerror(errno));
  socklen_t len = sizeof sa;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd_, 64) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(str("liveness port on ", addr, ": cannot listen: ", std::strerror(err)));
  }
  port_ = ntohs(sa.sin_port);
  acceptor_ = std::thread([this] { accept_until_closed(); });
}

LivenessPort::~LivenessPort() {
  ::shutdown(fd_, SHUT_RDWR);  // wakes the blocked accept() (EINVAL) on Linux
  acceptor_.join();
  ::close(fd_);
}

// Accepts and closes, so the listen queue never fills (a full queue drops connections, which a
// probe would take for no answer).
void LivenessPort::accept_until_closed() {
  for (;;) {
    const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn >= 0) {
      ::close(conn);
      continue;
    }
    // ECONNABORTED and the like concern one connection; anything else means shut down.
    if (errno != EINTR && errno != ECONNABORTED && errno != EPROTO) return;
  }
}

Liveness probe_liveness(const std::string& addr, uint16_t port, double timeout_s) {
  sockaddr_in sa = resolve_ipv4(addr, port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  CADRE_CHECK(fd >= 0, "probing ", addr, ":", port, ": socket(): ", std::strerror(errno));
  int err = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::ceil(timeout_s * 1000)));
      socklen_t len = sizeof err;
      if (ready <= 0)
        err = ETIMEDOUT;
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
  }
  ::close(fd);
  if (err == 0) return Liveness::kListening;
  return err == ECONNREFUSED ? Liveness::kRefused : Liveness::kNoAnswer;
}

const char* liveness_name(Liveness l) {
  switch (l) {
    case Liveness::kListening: return "listening";
    case Liveness::kRefused: return "refused";
    case Liveness::kNoAnswer: return "no answer";
  }
  return "?";
}

}  // namespace cadre::rdzv
