// The job store server's event loop (see server.h).
#include "store/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "store/auth.h"
#include "store/key_table.h"
#include "store/session.h"

namespace cadre::store {
namespace {

using Clock = std::chrono::steady_clock;

// A peer must have proven the secret within this long after connecting.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr size_t kMaxConnections = 4096;
// Connections still to prove the secret. Past this many the oldest is dropped for a newcomer:
// a flood of silent connections then only costs itself, while a real rank, which proves the
// secret within a round trip, is never locked out for the handshake window.
constexpr size_t kMaxUnproven = 128;
constexpr size_t kMaxQueuedRequests = 1024;     // pipelined requests of one connection
constexpr size_t kMaxPendingOutput = 64u << 20;  // stop reading a peer that does not read its replies
constexpr int kLoggedRefusals = 20;              // then every 1000th, so a flood cannot fill the log

std::string ip_text(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return str(buf, ":", ntohs(a.sin_port));
}

bool is_ip_literal(const std::string& host) {
  in_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1;
}

struct Connection {
  Connection(int fd, std::string peer, const std::string& secret, uint64_t serial)
      : fd(fd), serial(serial), peer(std::move(peer)), session(secret, random_bytes(kNonceBytes)),
        handshake_deadline(Clock::now() + kHandshakeTimeout) {}
  ~Connection() { ::close(fd); }
  int fd;
  uint64_t serial;  // tells a reused descriptor number from the connection that had it
  std::string peer;
  ServerSession session;
  Clock::time_point handshake_deadline;
  std::deque<Request> queue;
  bool parked = false;  // the front request waits for keys until parked_until
  Clock::time_point parked_until;
  std::string out;
  bool closing = false;  // send what is queued, then close
  std::vector<std::string> session_keys;  // set with SetSession: deleted when this connection goes
};

}  // namespace

std::string listen_address_for(const std::string& host) {
  if (host == "localhost") return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found) return "";
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  const bool loopback = (ntohl(addr.sin_addr.s_addr) >> 24) == 127;
  if (loopback) return is_ip_literal(host) ? std::string(buf) : "";
  // An address of this machine is one a socket can bind.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const bool local = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) ::close(fd);
  return local ? std::string(buf) : "";
}

struct StoreServer::Impl {
  std::string secret, address;
  uint16_t port = 0;
  int listen_fd = -1, wake[2] = {-1, -1};
  KeyTable table;
  std::map<int, std::unique_ptr<Connection>> connections;
  std::deque<std::pair<int, uint64_t>> unproven;  // accept order; entries go stale when proven or closed
  uint64_t next_serial = 0;
  std::atomic<int64_t> refused{0};
  std::thread thread;

  void refuse(Connection& c, const std::string& why) {
    const int64_t n = ++refused;
    if (n <= kLoggedRefusals || n % 1000 == 0)
      log::warn(str("job store ", address, ":", port, ": refused a connection from ", c.peer, ": ", why,
                    n == kLoggedRefusals ? " (further refusals are logged every 1000th)" : ""));
  }

  // Answers the connection's queued requests in order until one has to wait for keys.
  bool serve(Connection& c) {
    bool mutated = false;
    while (!c.queue.empty() && !c.parked) {
      const Request& r = c.queue.front();
      const bool waits = r.op == Op::Wait || (r.op == Op::Get && r.wait_ms > 0);
      if (waits && !table.ready(r)) {
        c.parked = true;
        c.parked_until = Clock::now() + std::chrono::milliseconds(r.wait_ms);
        break;
      }
      c.session.reply(table.apply(r));
      if (r.op == Op::SetSession) c.session_keys.push_back(r.keys[0]);
      mutated = mutated || KeyTable::mutates(r);
      c.queue.pop_front();
    }
    c.out += c.session.take_output();
    return mutated;
  }

  // A connection that goes takes its session keys with it (the peer died, or left).
  void forget_session_keys(Connection& c) {
    for (const std::string& key : c.session_keys) {
      Request r;
      r.op = Op::Delete;
      r.keys = {key};
      table.apply(r);
    }
    c.session_keys.clear();
  }

  // After a change, parked requests whose keys arrived are answered (which may change more).
  void wake_parked() {
    for (bool again = true; again;) {
      again = false;
      for (auto& [fd, c] : connections)
        if (c->parked && table.ready(c->queue.front())) {
          c->parked = false;
          again = serve(*c) || again;
        }
    }
  }

  void flush(Connection& c) {
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        c.out.clear();
        c.closing = true;  // the peer is gone
        return;
      }
      c.out.erase(0, static_cast<size_t>(n));
    }
  }

  Connection* unproven_connection(const std::pair<int, uint64_t>& entry) {
    auto it = connections.find(entry.first);
    if (it == connections.end() || it->second->serial != entry.second) return nullptr;
    Connection* c = it->second.get();
    return c->session.authenticated() || c->closing ? nullptr : c;
  }

  // How many connections still have to prove the secret (stale entries are dropped on the way).
  size_t unproven_count() {
    std::deque<std::pair<int, uint64_t>> live;
    for (const auto& entry : unproven)
      if (unproven_connection(entry)) live.push_back(entry);
    unproven.swap(live);
    return unproven.size();
  }

  void drop_oldest_unproven() {
    while (!unproven.empty()) {
      auto entry = unproven.front();
      unproven.pop_front();
      if (Connection* c = unproven_connection(entry)) {
        refuse(*c, str("dropped unproven after ", kMaxUnproven, " newer connections waited to authenticate"));
        connections.erase(entry.first);
        return;
      }
    }
  }

  void accept_all() {
    for (;;) {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that went away before we took it
      if (connections.size() >= kMaxConnections || unproven_count() >= kMaxUnproven) drop_oldest_unproven();
      if (connections.size() >= kMaxConnections) {
        ::close(fd);
        ++refused;
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Connection>(fd, ip_text(peer), secret, next_serial++);
      c->out = c->session.take_output();  // the greeting
      flush(*c);
      unproven.emplace_back(fd, c->serial);
      connections[fd] = std::move(c);
    }
  }

  // Reads what the peer sent; false when the connection must go.
  bool receive(Connection& c) {
    char buf[65536];
    ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      if (!c.session.authenticated()) refuse(c, "closed before authenticating");
      return false;
    }
    try {
      auto requests = c.session.receive(buf, static_cast<size_t>(n));
      if (c.session.closing()) {
        refuse(c, "wrong job secret");
        c.closing = true;
      }
      for (auto& r : requests) c.queue.push_back(std::move(r));
      if (c.queue.size() > kMaxQueuedRequests) throw ProtocolError(str(c.queue.size(), " requests queued without reading replies"));
    } catch (const ProtocolError& e) {
      refuse(c, e.what());
      return false;
    }
    if (serve(c)) wake_parked();
    return true;
  }

  void run() {
    for (;;) {
      std::vector<pollfd> fds = {{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
      auto next_deadline = Clock::now() + std::chrono::seconds(1);
      for (auto& [fd, c] : connections) {
        short events = 0;
        if (!c->parked && !c->closing && c->out.size() < kMaxPendingOutput) events |= POLLIN;
        if (!c->out.empty()) events |= POLLOUT;
        fds.push_back({fd, events, 0});
        if (!c->session.authenticated()) next_deadline = std::min(next_deadline, c->handshake_deadline);
        if (c->parked) next_deadline = std::min(next_deadline, c->parked_until);
      }
      auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - Clock::now()).count();
      int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait_ms, 0) + 1));
      if (ready < 0 && errno != EINTR) {
        log::error(str("job store ", address, ":", port, ": poll failed: ", std::strerror(errno), "; the store stops"));
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) accept_all();
      const auto now = Clock::now();
      for (size_t i = 2; i < fds.size(); ++i) {
        auto it = connections.find(fds[i].fd);
        if (it == connections.end()) continue;
        Connection& c = *it->second;
        bool keep = true;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) keep = receive(c);
        if (keep && !c.session.authenticated() && !c.closing && now >= c.handshake_deadline) {
          refuse(c, "no proof of the job secret within 10 s");
          keep = false;
        }
        if (keep && c.parked && now >= c.parked_until) {
          c.session.reply(table.timed_out(c.queue.front()));
          c.queue.pop_front();
          c.parked = false;
          if (serve(c)) wake_parked();
        }
        if (keep) flush(c);
        if (!keep || (c.closing && c.out.empty())) {
          forget_session_keys(c);
          connections.erase(it);
        }
      }
    }
  }
};

StoreServer::StoreServer(const std::string& address, uint16_t port, std::string secret) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.secret = std::move(secret);
  m.address = address.empty() ? "0.0.0.0" : address;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, m.address.c_str(), &addr.sin_addr) != 1)
    throw Error(str("job store: '", m.address, "' is not an IPv4 address to listen on"));
  m.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CADRE_CHECK(m.listen_fd >= 0, "job store: socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(m.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(m.listen_fd, 1024) != 0) {
    const int err = errno;
    ::close(m.listen_fd);
    throw Error(str("job store: cannot listen on ", m.address, ":", port, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof addr;
  ::getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  m.port = ntohs(addr.sin_port);
  if (::pipe2(m.wake, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(m.listen_fd);
    throw Error(str("job store: pipe: ", std::strerror(err)));
  }
  m.thread = std::thread([&m] { m.run(); });
}

StoreServer::~StoreServer() {
  const char stop = 1;
  ssize_t ignored = ::write(impl_->wake[1], &stop, 1);
  (void)ignored;
  impl_->thread.join();
  impl_->connections.clear();
  ::close(impl_->listen_fd);
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

uint16_t StoreServer::port() const { return impl_->port; }
const std::string& StoreServer::address() const { return impl_->address; }
int64_t StoreServer::refused() const { return impl_->refused.load(); }

}  // namespace cadre::store
