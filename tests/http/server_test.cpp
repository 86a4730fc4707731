// Cadre's HTTP server over real loopback sockets: pipelined requests answered in order, the
// connection cap answered 503 + Retry-After, header/body/idle deadlines, the send deadline on a
// client that does not read, a client's disconnect seen by the handler, a throwing handler,
// the cap per client behind trusted proxies (X-Forwarded-For, PROXY protocol headers), and
// stop() with idle connections open. Deadlines are short here (a fraction of a second);
// every wait of the test itself is bounded, and nothing asserts how fast anything was.
#include "core/error.h"
#include "http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace cadre::http {
namespace {

using Clock = std::chrono::steady_clock;

class Client {
 public:
  // from: the loopback address to connect from (all of 127/8 is this machine).
  explicit Client(int port, int rcvbuf = 0, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    if (from) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &src.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) throw std::runtime_error("bind failed");
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect failed");
  }
  ~Client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()); }
  // Reads until `text` is in what arrived, the peer closes, or 20 s pass.
  bool read_until(const std::string& text) { return read([&] { return got_.find(text) != std::string::npos; }); }
  // Reads until the peer closes (true) or 20 s pass (false).
  bool read_to_eof() {
    read([] { return false; });
    return eof_;
  }
  const std::string& got() const { return got_; }
  int fd() const { return fd_; }

 private:
  template <typename Done>
  bool read(Done done) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!done() && !eof_ && Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) eof_ = true;
      else got_.append(buf, static_cast<size_t>(n));
    }
    return done();
  }
  int fd_ = -1;
  std::string got_;
  bool eof_ = false;
};

std::string text_page(int status, const std::string& message, const Request*) {
  return "error " + std::to_string(status) + ": " + message;
}

// A server on a free loopback port, running on its own thread until the fixture ends.
class TestServer {
 public:
  TestServer(ServerLimits limits, Server::Handler handler)
      : server_(limits, std::move(handler), ErrorPage{"text/plain", text_page, nullptr}) {
    server_.bind("127.0.0.1", 0, "test");
    thread_ = std::thread([this] { server_.run(); });
  }
  ~TestServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return server_.port(); }
  Server& server() { return server_; }

 private:
  Server server_;
  std::thread thread_;
};

ServerLimits fast_limits() {
  ServerLimits l;
  l.parser.max_body_bytes = 1024;
  l.parser.max_header_bytes = 1024;
  l.header_timeout_s = 0.5;
  l.body_timeout_s = 0.5;
  l.idle_timeout_s = 0.5;
  l.send_timeout_s = 0.5;
  l.max_connections = 4;
  return l;
}

void echo(const Request& req, Response& res) { res.send(200, "text/plain", req.method + " " + req.path + " " + req.body); }

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  TestServer s(fast_limits(), echo);
  Client c(s.port());
  ASSERT_TRUE(c.send("POST /one HTTP/1.1\r\nContent-Length: 1\r\n\r\naGET /two HTTP/1.1\r\n\r\n"
                     "HEAD /three HTTP/1.1\r\n\r\nPOST /four HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: close\r\n\r\n2\r\nbc\r\n0\r\n\r\n"));
  ASSERT_TRUE(c.read_to_eof()) << c.got();
  const std::string& g = c.got();
  const size_t one = g.find("POST /one a"), two = g.find("GET /two "), four = g.find("POST /four bc");
  ASSERT_NE(one, std::string::npos) << g;
  ASSERT_NE(two, std::string::npos) << g;
  ASSERT_NE(four, std::string::npos) << g;
  EXPECT_LT(one, two);
  EXPECT_LT(two, four);
  EXPECT_EQ(g.find("HEAD /three "), std::string::npos) << "a HEAD answer carried a body";
  EXPECT_NE(g.find("Content-Length: 12\r\nConnection: keep-alive\r\n\r\nHTTP/1.1 200"), std::string::npos) << g;
  EXPECT_NE(g.find("Connection: close"), std::string::npos);
}

// 200 clients connecting at once (all handshakes before any request is sent): every one is
// accepted and answered; none sees a reset or an early EOF (the backlog is SOMAXCONN).
TEST(HttpServer, ABurstOfClientsIsServedWithoutResets) {
  ServerLimits l;
  l.max_connections_per_client = 0;  // all 200 come from 127.0.0.1
  TestServer s(l, echo);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 200; ++i) clients.push_back(std::make_unique<Client>(s.port()));
  for (size_t i = 0; i < clients.size(); ++i)
    ASSERT_TRUE(clients[i]->send("GET /c" + std::to_string(i) + " HTTP/1.1\r\nConnection: close\r\n\r\n")) << i;
  for (size_t i = 0; i < clients.size(); ++i) {
    EXPECT_TRUE(clients[i]->read_to_eof()) << i;
    EXPECT_NE(clients[i]->got().find("HTTP/1.1 200 OK"), std::string::npos) << i << ": " << clients[i]->got();
    EXPECT_NE(clients[i]->got().find("GET /c" + std::to_string(i) + " "), std::string::npos) << i;
  }
}

TEST(HttpServer, ConnectionsOverTheCapGet503WithRetryAfterAndTheCapFreesUp) {
  ServerLimits l = fast_limits();
  l.max_connections = 2;
  l.header_timeout_s = 60;  // the two holders keep their places for the whole test
  TestServer s(l, echo);
  Client held1(s.port()), held2(s.port());
  ASSERT_TRUE(held1.send("GET /a HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(held1.read_until("GET /a"));  // both holders are being served
  ASSERT_TRUE(held2.send("GET /b HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(held2.read_until("GET /b"));
  Client over(s.port());
  over.send("GET /c HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(over.read_to_eof()) << over.got();
  EXPECT_EQ(over.got().rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << over.got();
  EXPECT_NE(over.got().find("Retry-After: 1\r\n"), std::string::npos);
  EXPECT_NE(over.got().find("error 503: the server has 2 connections open"), std::string::npos);
  // A holder leaves: a new client is served again (once the server has seen the close).
  held1.close();
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    Client again(s.port());
    again.send("GET /d HTTP/1.1\r\nConnection: close\r\n\r\n");
    again.read_to_eof();
    served = again.got().find("GET /d") != std::string::npos;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(served);
}

TEST(HttpServer, ConnectionsOverTheCapOfOneClientAddressGet429AndOthersAreServed) {
  ServerLimits l = fast_limits();
  l.max_connections = 10;
  l.max_connections_per_client = 2;
  l.header_timeout_s = 60;
  TestServer s(l, echo);
  Client held1(s.port(), 0, "127.0.0.2"), held2(s.port(), 0, "127.0.0.2");
  ASSERT_TRUE(held1.send("GET /a HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(held1.read_until("GET /a"));
  ASSERT_TRUE(held2.send("GET /b HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(held2.read_until("GET /b"));
  Client third(s.port(), 0, "127.0.0.2");
  third.send("GET /c HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(third.read_to_eof());
  EXPECT_EQ(third.got().rfind("HTTP/1.1 429 Too Many Requests\r\n", 0), 0u) << third.got();
  EXPECT_NE(third.got().find("Retry-After: 1\r\n"), std::string::npos);
  EXPECT_NE(third.got().find("the limit per client"), std::string::npos);
  Client other(s.port(), 0, "127.0.0.1");
  other.send("GET /d HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(other.read_until("GET /d")) << other.got();
}

TEST(TrustedProxies, TheClientIsTheRightmostAddressNotATrustedProxy) {
  const TrustedProxies t = TrustedProxies::parse("10.0.0.0/8, 127.0.0.2,::1,192.168.1.0/25", "--trusted-proxies");
  EXPECT_TRUE(t.contains("10.200.3.4"));
  EXPECT_TRUE(t.contains("192.168.1.127"));
  EXPECT_FALSE(t.contains("192.168.1.128"));
  EXPECT_FALSE(t.contains("11.0.0.1"));
  EXPECT_TRUE(t.contains("::1"));
  EXPECT_FALSE(t.contains("::2"));
  EXPECT_FALSE(t.contains("not an address"));
  // An untrusted peer's header is never read.
  EXPECT_EQ(t.client_of("8.8.8.8", {"1.1.1.1"}), "8.8.8.8");
  // Through one proxy; through two (the balancer appended the client, an inner proxy the balancer).
  EXPECT_EQ(t.client_of("127.0.0.2", {"203.0.113.7"}), "203.0.113.7");
  EXPECT_EQ(t.client_of("127.0.0.2", {"203.0.113.7, 10.1.2.3"}), "203.0.113.7");
  // What a client wrote itself, left of the address the trusted proxy appended, is not believed.
  EXPECT_EQ(t.client_of("127.0.0.2", {"6.6.6.6, 203.0.113.7"}), "203.0.113.7");
  // Several header fields are one list, in order; an entry that is not an address ends the trust.
  EXPECT_EQ(t.client_of("127.0.0.2", {"6.6.6.6", "203.0.113.8"}), "203.0.113.8");
  EXPECT_EQ(t.client_of("127.0.0.2", {"unknown, 10.0.0.9"}), "10.0.0.9");
  EXPECT_EQ(t.client_of("127.0.0.2", {"garbage"}), "127.0.0.2");
  EXPECT_EQ(t.client_of("127.0.0.2", {}), "127.0.0.2");
  EXPECT_EQ(t.client_of("::1", {"2001:db8::1"}), "2001:db8::1");
  for (const char* bad : {"10.0.0.0/33", "::1/129", "example.com", "10.0.0.1/", "1.2.3.4,,5.6.7.8", "10.0.0.0/-1"}) {
    try {
      TrustedProxies::parse(bad, "--trusted-proxies");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--trusted-proxies"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(TrustedProxies::parse("", "--trusted-proxies").empty());
}

// 127.0.0.3 a trusted proxy, 2 requests per client, and the time for a test to hold requests open.
ServerLimits behind_proxy_limits() {
  ServerLimits l = fast_limits();
  l.max_connections = 20;
  l.max_connections_per_client = 2;
  l.header_timeout_s = 60;
  l.body_timeout_s = 60;
  l.trusted_proxies = TrustedProxies::parse("127.0.0.3", "test");
  return l;
}

// Behind a trusted proxy the cap counts the client each request stands for, while it runs (a
// request whose body has not arrived holds its place): a proxy's connections are not capped by
// its own address, a client over its cap gets 429 on its request, others go on.
TEST(HttpServer, BehindATrustedProxyTheCapCountsTheForwardedClient) {
  ServerLimits l = behind_proxy_limits();
  TestServer s(l, echo);
  auto forwarded = [](const std::string& client, const std::string& path) {
    return "POST " + path + " HTTP/1.1\r\nX-Forwarded-For: " + client + "\r\nContent-Length: 2\r\n\r\n";
  };
  // Two requests of client A in flight (heads read: the server asked for their bodies with 100
  // Continue, after taking their places; bodies not sent): A is at its cap.
  Client a1(s.port(), 0, "127.0.0.3"), a2(s.port(), 0, "127.0.0.3");
  for (Client* a : {&a1, &a2}) {
    ASSERT_TRUE(a->send("POST /" + std::string(a == &a1 ? "a1" : "a2") +
                        " HTTP/1.1\r\nX-Forwarded-For: 198.51.100.1\r\nExpect: 100-continue\r\nConnection: close\r\n"
                        "Content-Length: 2\r\n\r\n"));
    ASSERT_TRUE(a->read_until("HTTP/1.1 100 Continue\r\n\r\n")) << a->got();
  }
  // Connections from the proxy's own address beyond the cap are served, each for its client.
  std::vector<std::unique_ptr<Client>> others;
  for (int k = 0; k < 5; ++k) {
    others.push_back(std::make_unique<Client>(s.port(), 0, "127.0.0.3"));
    ASSERT_TRUE(others.back()->send(forwarded("198.51.100." + std::to_string(10 + k), "/b") + "ok"));
  }
  for (auto& c : others) EXPECT_TRUE(c->read_until("POST /b ok")) << c->got();
  // A third request of A: 429, though its connection is new and the proxy's.
  Client a3(s.port(), 0, "127.0.0.3");
  a3.send(forwarded("198.51.100.1", "/a3") + "ok");
  ASSERT_TRUE(a3.read_to_eof());
  EXPECT_EQ(a3.got().rfind("HTTP/1.1 429", 0), 0u) << a3.got();
  EXPECT_NE(a3.got().find("client 198.51.100.1 has 2 requests open"), std::string::npos) << a3.got();
  EXPECT_NE(a3.got().find("Retry-After: 1\r\n"), std::string::npos) << a3.got();
  // A's request ends: its place comes back before its connection closes (the answer alone can
  // reach the client first), so once a1 sees the close, A has a place again.
  ASSERT_TRUE(a1.send("ok"));
  ASSERT_TRUE(a1.read_to_eof());
  ASSERT_NE(a1.got().find("POST /a1 ok"), std::string::npos) << a1.got();
  Client a4(s.port(), 0, "127.0.0.3");
  a4.send(forwarded("198.51.100.1", "/a4") + "ok");
  EXPECT_TRUE(a4.read_until("POST /a4 ok")) << a4.got();
  // A peer that is not a trusted proxy is counted by its own address, whatever it forwards.
  Client d1(s.port(), 0, "127.0.0.4"), d2(s.port(), 0, "127.0.0.4");
  ASSERT_TRUE(d1.send(forwarded("198.51.100.50", "/d") + "ok"));
  ASSERT_TRUE(d1.read_until("POST /d ok"));
  ASSERT_TRUE(d2.send(forwarded("198.51.100.51", "/d") + "ok"));
  ASSERT_TRUE(d2.read_until("POST /d ok"));
  Client d3(s.port(), 0, "127.0.0.4");
  d3.send(forwarded("198.51.100.52", "/d") + "ok");
  ASSERT_TRUE(d3.read_to_eof());
  EXPECT_EQ(d3.got().rfind("HTTP/1.1 429", 0), 0u) << d3.got();
}

// Behind a layer-4 balancer (--proxy-protocol): each of its connections begins with a PROXY
// header, v1 or v2, and the cap counts the client the header names; a header split across
// packets is read whole; a health check (UNKNOWN) counts as the balancer; a connection of the
// balancer without a header is answered 400; an untrusted peer's header is never read.
TEST(HttpServer, BehindAProxyProtocolBalancerTheCapCountsTheClientItNames) {
  ServerLimits l = behind_proxy_limits();
  l.proxy_protocol = true;
  TestServer s(l, echo);
  auto v1 = [](const std::string& client) { return "PROXY TCP4 " + client + " 127.0.0.1 40000 8000\r\n"; };
  auto v2 = [](unsigned char last_octet) {  // 198.51.100.<last_octet> -> 127.0.0.1, ports 40000 -> 8000
    return std::string("\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\xc6\x33\x64", 19) + char(last_octet) +
           std::string("\x7f\x00\x00\x01\x9c\x40\x1f\x40", 8);
  };
  const std::string post = "POST /p HTTP/1.1\r\nContent-Length: 2\r\n\r\nok";
  // Two requests of 198.51.100.1 in flight (heads read, bodies not sent): it is at its cap.
  Client a1(s.port(), 0, "127.0.0.3"), a2(s.port(), 0, "127.0.0.3");
  ASSERT_TRUE(a1.send(v1("198.51.100.1") + "POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"));
  ASSERT_TRUE(a2.send(v2(1) + "POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"));
  for (Client* a : {&a1, &a2}) ASSERT_TRUE(a->read_until("HTTP/1.1 100 Continue\r\n\r\n")) << a->got();
  Client a3(s.port(), 0, "127.0.0.3");
  ASSERT_TRUE(a3.send(v1("198.51.100.1") + post));
  ASSERT_TRUE(a3.read_to_eof());
  EXPECT_EQ(a3.got().rfind("HTTP/1.1 429", 0), 0u) << a3.got();
  EXPECT_NE(a3.got().find("client 198.51.100.1 has 2 requests open"), std::string::npos) << a3.got();
  // Other clients through the same balancer are served, a header in pieces too.
  Client b(s.port(), 0, "127.0.0.3"), c(s.port(), 0, "127.0.0.3"), health(s.port(), 0, "127.0.0.3");
  ASSERT_TRUE(b.send(v2(2) + post));
  EXPECT_TRUE(b.read_until("POST /p ok")) << b.got();
  const std::string split = v1("198.51.100.3") + post;
  ASSERT_TRUE(c.send(split.substr(0, 9)));
  ASSERT_TRUE(c.send(split.substr(9)));
  EXPECT_TRUE(c.read_until("POST /p ok")) << c.got();
  ASSERT_TRUE(health.send("PROXY UNKNOWN\r\n" + post));
  EXPECT_TRUE(health.read_until("POST /p ok")) << health.got();
  // The balancer's connection without a header: 400, naming the PROXY protocol.
  Client bare(s.port(), 0, "127.0.0.3");
  ASSERT_TRUE(bare.send(post));
  ASSERT_TRUE(bare.read_to_eof());
  EXPECT_EQ(bare.got().rfind("HTTP/1.1 400", 0), 0u) << bare.got();
  EXPECT_NE(bare.got().find("PROXY protocol (--proxy-protocol): the connection did not begin with a PROXY"),
            std::string::npos) << bare.got();
  // An untrusted peer's header is not read: it is no HTTP request either.
  Client untrusted(s.port(), 0, "127.0.0.4");
  ASSERT_TRUE(untrusted.send(v1("198.51.100.9") + post));
  ASSERT_TRUE(untrusted.read_to_eof());
  EXPECT_EQ(untrusted.got().rfind("HTTP/1.1 400", 0), 0u) << untrusted.got();
  EXPECT_EQ(untrusted.got().find("PROXY protocol"), std::string::npos) << untrusted.got();
}

TEST(HttpServer, SlowHeadsAndBodiesGet408AndSilentConnectionsClose) {
  TestServer s(fast_limits(), echo);
  // One byte at a time, each well within any per-read timeout: the head's deadline still ends it.
  Client slow(s.port());
  const std::string head = "GET /slow HTTP/1.1\r\nX-Dribble: ";
  bool cut = false;
  for (size_t i = 0; i < 400 && !cut; ++i) {
    cut = !slow.send(std::string(1, i < head.size() ? head[i] : 'a'));
    pollfd p{slow.fd(), POLLIN, 0};
    cut = cut || ::poll(&p, 1, 50) > 0;
  }
  ASSERT_TRUE(slow.read_to_eof());
  EXPECT_EQ(slow.got().rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u) << slow.got();
  Client body(s.port());
  body.send("POST /b HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
  ASSERT_TRUE(body.read_to_eof());
  EXPECT_EQ(body.got().rfind("HTTP/1.1 408", 0), 0u) << body.got();
  EXPECT_NE(body.got().find("body timeout"), std::string::npos);
  Client silent(s.port());
  ASSERT_TRUE(silent.read_to_eof());
  EXPECT_EQ(silent.got(), "") << "a connection that sent nothing is closed without an answer";
  Client idle(s.port());
  idle.send("GET /i HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(idle.read_to_eof()) << "a kept-alive connection was not closed after the idle timeout";
  EXPECT_NE(idle.got().find("GET /i"), std::string::npos);
}

TEST(HttpServer, OversizedBodiesAndHeadsAreRefusedWithoutReadingThemWhole) {
  TestServer s(fast_limits(), echo);
  Client chunked(s.port());
  chunked.send("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  // An endless chunked body: the 413 arrives while it is still being sent.
  bool answered = false;
  for (int i = 0; i < 10000 && !answered; ++i) {
    if (!chunked.send("100\r\n" + std::string(256, 'x') + "\r\n")) break;
    pollfd p{chunked.fd(), POLLIN, 0};
    answered = ::poll(&p, 1, 0) > 0;
  }
  chunked.read_until("\r\n\r\n");
  EXPECT_EQ(chunked.got().rfind("HTTP/1.1 413 Content Too Large\r\n", 0), 0u) << chunked.got();
  chunked.close();
  Client length(s.port());
  length.send("POST /l HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n");
  ASSERT_TRUE(length.read_until("\r\n\r\n"));
  EXPECT_EQ(length.got().rfind("HTTP/1.1 413", 0), 0u) << length.got();
  length.close();
  Client headers(s.port());
  headers.send("GET / HTTP/1.1\r\nCookie: " + std::string(2000, 'c') + "\r\n\r\n");
  ASSERT_TRUE(headers.read_until("\r\n\r\n"));
  EXPECT_EQ(headers.got().rfind("HTTP/1.1 431", 0), 0u) << headers.got();
  headers.close();
  Client garbage(s.port());
  garbage.send("\x16\x03\x01 not http\r\n\r\n");
  ASSERT_TRUE(garbage.read_until("\r\n\r\n"));
  EXPECT_EQ(garbage.got().rfind("HTTP/1.1 400", 0), 0u) << garbage.got();
  garbage.close();
  // The server still answers (the four closed connections may take a moment to leave the cap).
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    Client fine(s.port());
    fine.send("GET /fine HTTP/1.1\r\n\r\n");
    served = fine.read_until("GET /fine");
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(served);
}

TEST(HttpServer, AStreamToAClientThatStopsReadingEndsAtTheSendDeadline) {
  std::promise<size_t> written;
  TestServer s(fast_limits(), [&](const Request&, Response& res) {
    size_t chunks = 0;
    res.begin_stream(200, "text/plain");
    const std::string piece(64 * 1024, 'z');
    while (chunks < 100000 && res.write(piece)) ++chunks;  // 6 GB: far beyond any socket buffer
    written.set_value(chunks);
  });
  Client reader_that_stops(s.port(), 4096);
  reader_that_stops.send("GET /stream HTTP/1.1\r\n\r\n");
  auto result = written.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the write never gave up";
  EXPECT_LT(result.get(), 100000u);
}

TEST(HttpServer, TheHandlerSeesAClientThatLeft) {
  std::promise<bool> gone;
  TestServer s(fast_limits(), [&](const Request&, Response& res) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    bool left = false;
    while (!left && Clock::now() < deadline) {
      left = res.client_gone();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    gone.set_value(left);
  });
  {
    Client c(s.port());
    c.send("GET /wait HTTP/1.1\r\n\r\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // closed while its answer is being prepared
  auto result = gone.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_TRUE(result.get());
}

TEST(HttpServer, AThrowingHandlerGets500AndTheServerGoesOn) {
  TestServer s(fast_limits(), [](const Request& req, Response& res) {
    if (req.path == "/throw") throw std::runtime_error("broken handler");
    echo(req, res);
  });
  Client c(s.port());
  c.send("GET /throw HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(c.read_to_eof());
  EXPECT_EQ(c.got().rfind("HTTP/1.1 500", 0), 0u) << c.got();
  EXPECT_NE(c.got().find("error 500: broken handler"), std::string::npos);
  Client d(s.port());
  d.send("GET /ok HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(d.read_until("GET /ok"));
}

TEST(HttpServer, StopEndsIdleConnectionsAndRunReturns) {
  ServerLimits l = fast_limits();
  l.idle_timeout_s = l.header_timeout_s = 600;
  Server server(l, echo, ErrorPage{"text/plain", text_page, nullptr});
  server.bind("127.0.0.1", 0, "test");
  auto ran = std::async(std::launch::async, [&] { server.run(); });
  Client idle(server.port()), silent(server.port());
  idle.send("GET /x HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(idle.read_until("GET /x"));
  server.stop();
  ASSERT_EQ(ran.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(idle.read_to_eof());
  EXPECT_TRUE(silent.read_to_eof());
  EXPECT_EQ(server.open_connections(), 0);
}

TEST(HttpServer, AnAddressThatIsNotThisMachinesIsAClearError) {
  Server server(fast_limits(), echo, ErrorPage{});
  try {
    server.bind("192.0.2.1", 0, "--host");
    FAIL() << "bound a TEST-NET address";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--host: cannot listen on 192.0.2.1:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cadre::http
