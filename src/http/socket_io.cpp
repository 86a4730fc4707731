// poll()-based waits and writes with deadlines (see socket_io.h).
#include "http/socket_io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace cadre::http {

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

namespace {

// Milliseconds until the deadline, rounded up, at least 0.
int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

}  // namespace

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

Wait wait_readable(int fd, int stop_fd, Clock::time_point deadline) {
  while (true) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, ms_until(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Wait::Ready;  // let the read report the error
    if (stop_fd >= 0 && (fds[1].revents & POLLIN)) return Wait::Stopped;
    if (fds[0].revents != 0) return Wait::Ready;
    if (Clock::now() >= deadline) return Wait::Timeout;
  }
}

bool send_all(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, ms_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;  // the deadline passed with the send buffer still full
    if (p.revents & (POLLERR | POLLHUP)) return false;
  }
  return true;
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP)) return true;
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void lingering_close(int fd, double seconds, size_t max_bytes) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = after(seconds);
  char sink[16384];
  size_t dropped = 0;
  while (dropped < max_bytes && wait_readable(fd, -1, deadline) == Wait::Ready) {
    const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (n > 0) dropped += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace cadre::http
