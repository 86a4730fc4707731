// Abstract-namespace Unix datagram sockets (see worker_channel.h).
#include "obs/worker_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "core/error.h"

namespace cadre::obs {
namespace {

constexpr size_t kMaxMessage = 64 * 1024;

// "@name" -> an abstract address (leading NUL byte); the '@' is how `ss -x` shows them too.
socklen_t abstract_address(const std::string& name, sockaddr_un* addr) {
  CADRE_CHECK(name.size() > 1 && name[0] == '@' && name.size() < sizeof addr->sun_path,
              "metrics channel: bad socket name '", name, "' (expected @name)");
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, name.data() + 1, name.size() - 1);
  return socklen_t(offsetof(sockaddr_un, sun_path) + name.size());
}

}  // namespace

ChannelSender::ChannelSender(const std::string& name) {
  sockaddr_un addr;
  socklen_t len = abstract_address(name, &addr);
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  CADRE_CHECK(fd_ >= 0, "metrics channel: socket: ", std::strerror(errno));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw Error(str("metrics channel: cannot reach the agent at ", name, ": ", std::strerror(err)));
  }
}

ChannelSender::~ChannelSender() {
  if (fd_ >= 0) ::close(fd_);
}

bool ChannelSender::send(const std::string& message) {
  if (message.size() > kMaxMessage) {
    ++dropped_;
    return false;
  }
  ssize_t n = ::send(fd_, message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == ssize_t(message.size())) return true;
  ++dropped_;  // EAGAIN (the agent's queue is full) or ECONNREFUSED (the agent is gone)
  return false;
}

ChannelReceiver::ChannelReceiver() {
  static std::atomic<int> counter{0};
  std::random_device random;
  name_ = str("@cadre-metrics-", ::getpid(), "-", counter++, "-", std::hex, random());
  sockaddr_un addr;
  socklen_t len = abstract_address(name_, &addr);
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  CADRE_CHECK(fd_ >= 0, "metrics channel: socket: ", std::strerror(errno));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int err = errno;
    ::close(fd_);
    throw Error(str("metrics channel: cannot bind ", name_, ": ", std::strerror(err)));
  }
}

ChannelReceiver::~ChannelReceiver() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> ChannelReceiver::receive(std::chrono::milliseconds timeout) {
  std::vector<std::string> out;
  pollfd p{fd_, POLLIN, 0};
  int ready = ::poll(&p, 1, int(timeout.count()));
  if (ready <= 0) return out;
  std::string buf(kMaxMessage, '\0');
  for (;;) {
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) break;  // EAGAIN: drained
    out.emplace_back(buf.data(), size_t(n));
  }
  return out;
}

}  // namespace cadre::obs
