// The accepting thread, the connection cap and the connection threads (see server.h).
#include "http/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "http/connection.h"
#include "http/socket_io.h"

namespace cadre::http {
namespace {

// Refused connections whose 503 is written and whose close waits for the client's FIN (or this
// long), so that the answer is not destroyed by a reset; beyond the count they close at once.
constexpr double kRefusedLingerSeconds = 2.0;
constexpr size_t kMaxRefusedLingering = 1024;

// The client's address without its port: what the per-client cap counts.
std::string address_of(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = "";
  if (peer.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text, sizeof text);
  else if (peer.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr, text, sizeof text);
  return text;
}

struct Refused {
  int fd;
  Clock::time_point until;
};

}  // namespace

class Server::Impl : public ClientSlots {
 public:
  Impl(ServerLimits l, Handler h, ErrorPage e) : limits(l), handler(std::move(h)), errors(std::move(e)) {
    stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    CADRE_CHECK(stop_fd >= 0, "http: eventfd failed: ", std::strerror(errno));
  }
  ~Impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    ::close(stop_fd);
  }

  void accept_ready();
  // A proxy's connection is counted only in `connections`: its requests take places per client.
  void start_connection(int fd, const std::string& client, bool proxy);
  void refuse(int fd, const std::string& answer, int status);
  void drop_refused(bool all);
  int poll_timeout_ms() const;
  std::string refusal(int status, const std::string& message) const;
  // `counted`: the connection held a place of its address (every peer's but a trusted proxy's).
  void connection_ended(const std::string& client, bool counted);
  bool acquire(const std::string& client) override;
  void release(const std::string& client) override;
  void drop_place(const std::string& client);  // caller holds mutex

  ServerLimits limits;
  Handler handler;
  ErrorPage errors;
  int listen_fd = -1, stop_fd = -1, port = 0;
  std::string server_full, client_full;  // the prebuilt 503 and 429
  std::vector<Refused> refused;
  bool accept_backoff = false;
  mutable std::mutex mutex;
  std::condition_variable ended;
  int connections = 0;
  std::map<std::string, int> per_client;  // open connections by client address
};

std::string Server::Impl::refusal(int status, const std::string& message) const {
  const std::string body = errors.body ? errors.body(status, message, nullptr) : message + "\n";
  return "HTTP/1.1 " + std::to_string(status) + " " + status_reason(status) + "\r\nContent-Type: " +
         errors.content_type + "\r\nRetry-After: 1\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

void Server::Impl::connection_ended(const std::string& client, bool counted) {
  // One critical section: the destructor may go as soon as `connections` reaches 0.
  std::lock_guard<std::mutex> lock(mutex);
  --connections;
  if (counted) drop_place(client);
  ended.notify_all();
}

void Server::Impl::drop_place(const std::string& client) {
  auto it = per_client.find(client);
  if (it != per_client.end() && --it->second == 0) per_client.erase(it);
}

bool Server::Impl::acquire(const std::string& client) {
  std::lock_guard<std::mutex> lock(mutex);
  int& mine = per_client[client];
  if (limits.max_connections_per_client > 0 && mine >= limits.max_connections_per_client) {
    if (mine == 0) per_client.erase(client);
    return false;
  }
  ++mine;
  return true;
}

void Server::Impl::release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mutex);
  drop_place(client);
}

// Called with a place already counted for the connection (see accept_ready).
void Server::Impl::start_connection(int fd, const std::string& client, bool proxy) {
  try {
    std::thread([this, fd, client, proxy] {
      serve_connection(fd, ConnectionContext{limits, handler, errors, stop_fd, client, proxy ? this : nullptr,
                                             proxy && limits.proxy_protocol});
      connection_ended(client, !proxy);
    }).detach();
  } catch (const std::system_error& e) {
    // No thread to be had: the client is told, as over the cap.
    log::warn(std::string("http: cannot start a connection thread: ") + e.what());
    connection_ended(client, !proxy);
    refuse(fd, server_full, 503);
  }
}

void Server::Impl::refuse(int fd, const std::string& answer, int status) {
  if (errors.answered) errors.answered(status, nullptr);
  // Small enough for any empty send buffer; a client that cannot take it gets nothing.
  (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_WR);
  if (refused.size() >= kMaxRefusedLingering) {
    ::close(fd);
    return;
  }
  refused.push_back({fd, after(kRefusedLingerSeconds)});
}

// Reads and drops what refused clients still send; closes those that finished or ran out of time.
void Server::Impl::drop_refused(bool all) {
  const auto now = Clock::now();
  std::vector<Refused> kept;
  for (const Refused& r : refused) {
    // At most 64 KiB a round from each, so a client sending at full speed cannot keep the
    // accepting thread here.
    char sink[4096];
    ssize_t n = 0;
    for (int k = 0; k < 16 && (n = ::recv(r.fd, sink, sizeof sink, MSG_DONTWAIT)) > 0; ++k) {
    }
    const bool open = n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    if (all || !open || now >= r.until) ::close(r.fd);
    else kept.push_back(r);
  }
  refused.swap(kept);
}

int Server::Impl::poll_timeout_ms() const {
  if (accept_backoff) return 100;  // out of descriptors: the backlog holds clients meanwhile
  if (refused.empty()) return -1;
  auto first = refused.front().until;
  for (const Refused& r : refused) first = std::min(first, r.until);
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(first - Clock::now()).count();
  return static_cast<int>(std::max<long long>(ms, 0));
}

void Server::Impl::accept_ready() {
  accept_backoff = false;
  for (int i = 0; i < 256; ++i) {
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        log::warn(std::string("http: accept: ") + std::strerror(errno) + " (waiting for connections to close)");
        accept_backoff = true;
        return;
      }
      // A connection reset while in the backlog (ECONNABORTED), a signal, a network error:
      // that client's problem. Listening goes on whatever accept() says.
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const std::string client = address_of(peer);
    const bool proxy = limits.trusted_proxies.contains(client);
    int refused_with = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      int& mine = per_client[client];
      if (connections >= limits.max_connections) {
        refused_with = 503;
      } else if (!proxy && limits.max_connections_per_client > 0 && mine >= limits.max_connections_per_client) {
        refused_with = 429;
      } else {
        ++connections;
        if (!proxy) ++mine;
      }
      if (mine == 0) per_client.erase(client);
    }
    if (refused_with == 503) refuse(fd, server_full, 503);
    else if (refused_with == 429) refuse(fd, client_full, 429);
    else start_connection(fd, client, proxy);
  }
}

Server::Server(ServerLimits limits, Handler handler, ErrorPage errors)
    : impl_(std::make_unique<Impl>(limits, std::move(handler), std::move(errors))) {}

Server::~Server() {
  stop();
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->ended.wait(lock, [&] { return impl_->connections == 0; });
}

void Server::bind(const std::string& host, int port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  CADRE_CONFIG_CHECK(rc == 0, what, ": cannot listen on ", host, ":", port, ": ", ::gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = found; a && impl_->listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // SOMAXCONN: the kernel's own cap on the backlog, so a burst of clients waits in the
    // backlog instead of having its handshakes dropped.
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      impl_->listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  CADRE_CONFIG_CHECK(impl_->listen_fd >= 0, what, ": cannot listen on ", host, ":", port, " (", why,
                     "; in use, or not an address of this machine)");
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  impl_->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const ServerLimits& l = impl_->limits;
  impl_->server_full = impl_->refusal(
      503, "the server has " + std::to_string(l.max_connections) + " connections open, its limit; retry later");
  impl_->client_full = impl_->refusal(429, "this client address has " + std::to_string(l.max_connections_per_client) +
                                               " connections open, the limit per client; retry later");
}

int Server::port() const { return impl_->port; }

int Server::open_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->connections;
}

void Server::run() {
  Impl& s = *impl_;
  CADRE_CHECK(s.listen_fd >= 0, "http: run() before bind()");
  while (true) {
    std::vector<pollfd> fds = {{s.listen_fd, POLLIN, 0}, {s.stop_fd, POLLIN, 0}};
    for (const Refused& r : s.refused) fds.push_back({r.fd, POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), s.poll_timeout_ms());
    if (n < 0 && errno != EINTR) log::warn(std::string("http: poll: ") + std::strerror(errno));
    if (fds[1].revents & POLLIN) break;
    if (!s.refused.empty()) s.drop_refused(false);
    if (fds[0].revents & POLLIN || s.accept_backoff) s.accept_ready();
  }
  s.drop_refused(true);
  ::close(s.listen_fd);
  s.listen_fd = -1;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.ended.wait(lock, [&] { return s.connections == 0; });
}

void Server::stop() {
  const uint64_t one = 1;
  (void)!::write(impl_->stop_fd, &one, sizeof one);
}

}  // namespace cadre::http
