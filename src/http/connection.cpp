// The per-connection request loop (see connection.h).
#include "http/connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "core/log.h"
#include "http/proxy_protocol.h"
#include "http/socket_io.h"

namespace cadre::http {
namespace {

constexpr size_t kReadChunk = 16384;
// After an error answer, the client's bytes still in flight are dropped for this long or this
// many, so a client sending an oversized body can finish its write and read the 413 instead of
// meeting a reset (or SIGPIPE) mid-write; 4 MiB covers a body a few times the default limit.
constexpr double kLingerSeconds = 2.0;
constexpr size_t kLingerBytes = size_t{4} << 20;

class Connection {
 public:
  Connection(int fd, const ConnectionContext& c) : fd_(fd), c_(c), parser_(c.limits.parser), accepted_(Clock::now()) {}
  ~Connection() { release_slot(); }

  // Serves requests until the connection should close; true when the client may still be
  // sending (the close must linger).
  bool run();

 private:
  enum class Read { Request, Closed, Failed };
  Read read_request();
  // The PROXY protocol header a trusted proxy's connection begins with: its client in
  // `proxied_`; 400 answered when the bytes are not one.
  Read read_proxy_header();
  bool fill(Clock::time_point deadline, bool* timed_out, bool* stopped);
  Clock::time_point deadline() const;
  void answer_error(int status, const std::string& message, const Request* request);
  bool handle(const Request& request);
  // Behind a trusted proxy: the place of the client the request stands for, taken when its
  // head is complete (a body that never arrives holds it, as a connection would); false (and
  // 429 answered) when that client is at its cap.
  bool take_slot(const Request& head);
  void release_slot();

  int fd_;
  const ConnectionContext& c_;
  RequestParser parser_;
  std::string buffer_;  // received, not yet parsed
  size_t parsed_ = 0;
  bool first_ = true;
  std::string slot_;  // the client whose place this request holds ("" none)
  std::string proxied_;  // the client a PROXY protocol header named ("" none: the peer)
  Clock::time_point accepted_, idle_since_, head_since_, body_since_;
};

Clock::time_point Connection::deadline() const {
  auto plus = [](Clock::time_point t, double s) {
    return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  if (parser_.head_done()) return plus(body_since_, c_.limits.body_timeout_s);
  if (parser_.started()) return plus(first_ ? accepted_ : head_since_, c_.limits.header_timeout_s);
  return first_ ? plus(accepted_, c_.limits.header_timeout_s) : plus(idle_since_, c_.limits.idle_timeout_s);
}

// Reads what is there (waiting until the deadline); false on EOF, error, timeout or stop.
bool Connection::fill(Clock::time_point deadline, bool* timed_out, bool* stopped) {
  const Wait w = wait_readable(fd_, c_.stop_fd, deadline);
  *timed_out = w == Wait::Timeout;
  *stopped = w == Wait::Stopped;
  if (w != Wait::Ready) return false;
  if (parsed_ == buffer_.size()) {
    buffer_.clear();
    parsed_ = 0;
  }
  const size_t old = buffer_.size();
  buffer_.resize(old + kReadChunk);
  ssize_t n;
  do {
    n = ::recv(fd_, &buffer_[old], kReadChunk, 0);
  } while (n < 0 && errno == EINTR);
  buffer_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  return n > 0;
}

Connection::Read Connection::read_request() {
  idle_since_ = Clock::now();
  bool continued = false;
  while (true) {
    const bool was_started = parser_.started(), was_head = parser_.head_done();
    parsed_ += parser_.feed(std::string_view(buffer_).substr(parsed_));
    if (!was_started && parser_.started()) head_since_ = Clock::now();
    if (!was_head && parser_.head_done()) {
      body_since_ = Clock::now();
      if (!take_slot(parser_.request())) return Read::Failed;
    }
    if (parser_.state() == RequestParser::State::Complete) return Read::Request;
    if (parser_.state() == RequestParser::State::Failed) {
      answer_error(parser_.error_status(), parser_.error_message(), nullptr);
      return Read::Failed;
    }
    if (parser_.head_done() && parser_.expects_continue() && !continued) {
      continued = true;
      if (!send_all(fd_, "HTTP/1.1 100 Continue\r\n\r\n", after(c_.limits.send_timeout_s))) return Read::Closed;
    }
    bool timed_out = false, stopped = false;
    if (fill(deadline(), &timed_out, &stopped)) continue;
    // A connection with no request begun closes quietly; one cut mid-request by the deadline
    // is told so.
    if (timed_out && parser_.started()) {
      answer_error(408, parser_.head_done() ? "the request body did not arrive within the body timeout"
                                            : "the request head did not arrive within the header timeout",
                   nullptr);
      return Read::Failed;
    }
    return Read::Closed;
  }
}

Connection::Read Connection::read_proxy_header() {
  while (true) {
    ProxyHeader header;
    std::string error;
    switch (proxy_header_parse(std::string_view(buffer_).substr(parsed_), &header, &error)) {
      case ProxyParse::Done:
        parsed_ += header.length;
        proxied_ = header.client;
        return Read::Request;
      case ProxyParse::Invalid:
        answer_error(400, "PROXY protocol (--proxy-protocol): " + error, nullptr);
        return Read::Failed;
      case ProxyParse::NeedMore:
        break;
    }
    bool timed_out = false, stopped = false;
    if (!fill(deadline(), &timed_out, &stopped)) return Read::Closed;  // within the header timeout
  }
}

bool Connection::take_slot(const Request& head) {
  if (!c_.clients) return true;
  std::vector<std::string> forwarded;
  for (const auto& [key, value] : head.headers)
    if (equals_ignore_case(key, "X-Forwarded-For")) forwarded.push_back(value);
  // A PROXY header's client stands where the peer would: if it is itself a trusted proxy, its
  // X-Forwarded-For is read as the peer's would be.
  const std::string client = c_.limits.trusted_proxies.client_of(proxied_.empty() ? c_.peer : proxied_, forwarded);
  if (!c_.clients->acquire(client)) {
    answer_error(429, "client " + client + " has " + std::to_string(c_.limits.max_connections_per_client) +
                          " requests open, the limit per client; retry later", &head);
    return false;
  }
  slot_ = client;
  return true;
}

void Connection::release_slot() {
  if (slot_.empty()) return;
  c_.clients->release(slot_);
  slot_.clear();
}

void Connection::answer_error(int status, const std::string& message, const Request* request) {
  Response r(fd_, false, false, true, c_.limits.send_timeout_s);
  const std::string body = c_.errors.body ? c_.errors.body(status, message, request) : message + "\n";
  Headers extra;
  if (status == 503 || status == 429) extra.emplace_back("Retry-After", "1");
  r.send(status, c_.errors.content_type, body, extra);
  if (c_.errors.answered) c_.errors.answered(status, request);
}

// Answers one request; true when the connection serves the next.
bool Connection::handle(const Request& request) {
  Response response(fd_, request.method == "HEAD", request.keep_alive(), request.minor_version >= 1,
                    c_.limits.send_timeout_s);
  try {
    c_.handler(request, response);
  } catch (const std::exception& e) {
    log::error("http: " + request.method + " " + request.path + ": " + e.what());
    if (response.started()) return false;  // an answer cut short: only closing tells the client
    response.close_after();
    const std::string body = c_.errors.body ? c_.errors.body(500, e.what(), &request) : std::string(e.what()) + "\n";
    response.send(500, c_.errors.content_type, body);
    if (c_.errors.answered) c_.errors.answered(500, &request);
    return false;
  }
  if (response.abandoned()) return false;
  if (!response.started()) {
    response.close_after();
    response.send(500, c_.errors.content_type,
                  c_.errors.body ? c_.errors.body(500, "no answer", &request) : "no answer\n");
    if (c_.errors.answered) c_.errors.answered(500, &request);
    return false;
  }
  if (!response.keep_alive()) return false;
  // A drain: answers in progress complete, the connection does not wait for another request.
  return wait_readable(c_.stop_fd, -1, Clock::now()) != Wait::Ready;
}

bool Connection::run() {
  if (c_.proxy_header) {
    const Read r = read_proxy_header();
    if (r != Read::Request) return r == Read::Failed;
  }
  while (true) {
    const Read r = read_request();
    if (r == Read::Failed) return true;
    if (r == Read::Closed) return false;
    const Request request = parser_.take_request();
    const bool next = handle(request);
    release_slot();
    if (!next) return parsed_ < buffer_.size();
    first_ = false;
  }
}

}  // namespace

void serve_connection(int fd, const ConnectionContext& context) {
  bool linger = false;
  try {
    linger = Connection(fd, context).run();
  } catch (const std::exception& e) {
    log::error(std::string("http: connection: ") + e.what());
  }
  if (linger) lingering_close(fd, kLingerSeconds, kLingerBytes);
  else ::close(fd);
}

}  // namespace cadre::http
