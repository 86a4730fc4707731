// Job store client: connections with deadlines, the handshake, and one call per operation
// (see client.h).
#include "store/client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/ipv4_address.h"
#include "store/auth.h"

namespace cadre::store {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// Thrown inside the client for a deadline that passed; callers turn it into their message.
struct TimedOut {};

}  // namespace

struct StoreClient::Connection {
  int fd = -1;
  FrameReader frames{kMaxFrame};
  ~Connection() {
    if (fd >= 0) ::close(fd);
  }

  void send_frame(const std::string& payload, Clock::time_point deadline) {
    std::string bytes;
    frame_append(bytes, payload);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, remaining_ms(deadline)) == 0) throw TimedOut{};
        continue;
      }
      throw Error(str("send: ", std::strerror(errno)));
    }
  }

  std::string read_frame(Clock::time_point deadline) {
    for (;;) {
      if (auto frame = frames.next()) return *frame;
      pollfd p{fd, POLLIN, 0};
      int ready = ::poll(&p, 1, remaining_ms(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) throw TimedOut{};
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n == 0) throw Error("the store closed the connection");
      if (n < 0) throw Error(str("recv: ", std::strerror(errno)));
      frames.feed(buf, static_cast<size_t>(n));
    }
  }
};

StoreClient::StoreClient(std::string host, uint16_t port, std::string secret, std::chrono::milliseconds timeout,
                         std::string name)
    : host_(std::move(host)), port_(port), name_(std::move(name)), secret_(std::move(secret)), timeout_(timeout) {
  // The server may not be listening yet (rank 0 or the hosting agent starting up): retry a
  // refused connection until the deadline.
  const auto deadline = Clock::now() + timeout_;
  std::string last_error = "no attempt";
  for (;;) {
    try {
      idle_.push_back(open(deadline));
      return;
    } catch (const NoGreeting&) {
      throw;
    } catch (const AuthenticationFailed&) {
      throw;
    } catch (const Error& e) {
      last_error = e.what();
    }
    if (Clock::now() >= deadline)
      throw Error(str("cannot reach the ", name_, " at ", describe(), " within ", timeout_.count(), " ms: ", last_error));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, remaining_ms(deadline) + 1)));
  }
}

StoreClient::~StoreClient() = default;

std::string StoreClient::describe() const { return str(host_, ":", port_); }

std::unique_ptr<StoreClient::Connection> StoreClient::open(Clock::time_point deadline) {
  sockaddr_in addr = resolve_ipv4(host_, port_);
  auto c = std::make_unique<Connection>();
  c->fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) throw Error(str("socket: ", std::strerror(errno)));
  int one = 1;
  ::setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(c->fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) throw Error(str("connect: ", std::strerror(errno)));
    pollfd p{c->fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) == 0) throw Error("connect: timed out");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) throw Error(str("connect: ", std::strerror(err)));
  }
  try {
    c->frames.set_max_frame(kMaxHandshakeFrame);
    const std::string server_nonce = hello_decode(c->read_frame(deadline));
    const std::string client_nonce = random_bytes(kNonceBytes);
    c->send_frame(proof_encode(client_nonce, auth_proof(secret_, Role::Client, server_nonce, client_nonce)), deadline);
    auto [accepted, rest] = verdict_decode(c->read_frame(deadline));
    if (!accepted)
      throw AuthenticationFailed(str("the ", name_, " at ", describe(), " refused this client: ", rest.substr(0, 200),
                                     " (every node and rank must use the same job secret)"));
    if (!proofs_equal(rest, auth_proof(secret_, Role::Server, client_nonce, server_nonce)))
      throw AuthenticationFailed(str("the program at ", describe(), " could not prove it knows the job secret "
                                     "(another program on that port?)"));
    c->frames.set_max_frame(kMaxFrame);
  } catch (const TimedOut&) {
    throw NoGreeting(str("the program listening on ", describe(), " did not answer as a Cadre job store within ",
                         timeout_.count(), " ms"));
  } catch (const ProtocolError& e) {
    throw NoGreeting(str("the program listening on ", describe(), " is not a Cadre job store: ", e.what()));
  }
  return c;
}

Reply StoreClient::exchange(const Request& request, std::chrono::milliseconds extra_wait, const std::string& what) {
  const auto deadline = Clock::now() + timeout_ + extra_wait;
  std::unique_ptr<Connection> c;
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) {
    try {
      c = open(Clock::now() + timeout_);
    } catch (const Error& e) {
      throw Error(str(name_, " ", describe(), ": ", what, ": ", e.what()));
    }
  }
  Reply reply = round_trip(*c, request, deadline, timeout_ + extra_wait, what);
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    idle_.push_back(std::move(c));
  }
  if (reply.status == Status::Failed) throw Error(str(name_, " ", describe(), ": ", what, ": ", reply.value));
  return reply;
}

Reply StoreClient::round_trip(Connection& c, const Request& request, Clock::time_point deadline,
                              std::chrono::milliseconds waited, const std::string& what) {
  try {
    c.send_frame(request_encode(request), deadline);
    return reply_decode(c.read_frame(deadline));
  } catch (const TimedOut&) {
    throw Error(str(name_, " ", describe(), ": ", what, ": no answer within ", waited.count(), " ms"));
  } catch (const Error& e) {
    throw Error(str(name_, " ", describe(), ": ", what, ": ", e.what()));
  }
}

void StoreClient::set_session(const std::string& key, const std::string& value) {
  Request r;
  r.op = Op::SetSession;
  r.keys = {key};
  r.value = value;
  const std::string what = "set_session(" + key + ")";
  std::lock_guard<std::mutex> lock(session_mutex_);
  const auto deadline = Clock::now() + timeout_;
  Reply reply;
  try {
    if (!session_) session_ = open(deadline);
    reply = round_trip(*session_, r, deadline, timeout_, what);
  } catch (const Error& e) {
    session_.reset();  // a broken session connection: the next call opens a new one
    throw Error(str(name_, " ", describe(), ": ", what, ": ", e.what()));
  }
  if (reply.status == Status::Failed) throw Error(str(name_, " ", describe(), ": ", what, ": ", reply.value));
}

void StoreClient::set(const std::string& key, const std::string& value) {
  Request r;
  r.op = Op::Set;
  r.keys = {key};
  r.value = value;
  exchange(r, {}, "set(" + key + ")");
}

std::optional<std::string> StoreClient::try_get(const std::string& key) {
  Request r;
  r.op = Op::Get;
  r.keys = {key};
  Reply reply = exchange(r, {}, "get(" + key + ")");
  if (reply.status == Status::NotFound) return std::nullopt;
  return reply.value;
}

std::string StoreClient::get(const std::string& key, std::chrono::milliseconds wait) {
  Request r;
  r.op = Op::Get;
  r.keys = {key};
  r.wait_ms = static_cast<uint32_t>(std::clamp<int64_t>(wait.count(), 1, UINT32_MAX));
  Reply reply = exchange(r, wait, "get(" + key + ")");
  if (reply.status != Status::Ok)
    throw Error(str(name_, " ", describe(), ": get(", key, "): the key did not appear within ", wait.count(), " ms"));
  return reply.value;
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  Request r;
  r.op = Op::Add;
  r.keys = {key};
  r.delta = delta;
  return exchange(r, {}, "add(" + key + ")").number;
}

std::optional<std::string> StoreClient::compare_set(const std::string& key, const std::string& expected,
                                                   const std::string& desired) {
  Request r;
  r.op = Op::CompareSet;
  r.keys = {key};
  r.value = expected;
  r.desired = desired;
  Reply reply = exchange(r, {}, "compare_set(" + key + ")");
  if (reply.status == Status::NotFound) return std::nullopt;
  return reply.value;
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  Request r;
  r.op = Op::Check;
  r.keys = keys;
  return exchange(r, {}, "check").number != 0;
}

bool StoreClient::erase(const std::string& key) {
  Request r;
  r.op = Op::Delete;
  r.keys = {key};
  return exchange(r, {}, "delete(" + key + ")").number != 0;
}

int64_t StoreClient::num_keys() {
  Request r;
  r.op = Op::NumKeys;
  return exchange(r, {}, "num_keys").number;
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds wait) {
  Request r;
  r.op = Op::Wait;
  r.keys = keys;
  r.wait_ms = static_cast<uint32_t>(std::clamp<int64_t>(wait.count(), 1, UINT32_MAX));
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k;
  if (exchange(r, wait, "wait(" + names + ")").status != Status::Ok)
    throw Error(str(name_, " ", describe(), ": wait(", names, "): the keys did not all appear within ", wait.count(), " ms"));
}

}  // namespace cadre::store
