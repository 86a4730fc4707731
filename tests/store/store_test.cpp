// The job store on loopback, in one process: what each operation means, that a wait in one
// thread does not hold up another's calls, and the doors it keeps shut: a client without the
// secret is refused and changes nothing, a server that cannot prove the secret is refused by
// the client, a program that is not a store gets a clear error, and a huge length prefix
// (before or after authentication) closes the connection without the server growing.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "store/auth.h"
#include "store/client.h"
#include "store/secret.h"
#include "store/server.h"
#include "store/wire.h"

using namespace cadre::store;
using namespace std::chrono_literals;

namespace {

const std::string kSecret = "store-test-secret-0123456789";

int connect_raw(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads one frame from a raw socket ("" when the peer closed instead).
std::string read_frame(int fd) {
  FrameReader frames(kMaxFrame);
  char buf[4096];
  for (;;) {
    if (auto f = frames.next()) return *f;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return "";
    frames.feed(buf, static_cast<size_t>(n));
  }
}

bool send_frame(int fd, const std::string& payload) {
  std::string bytes;
  frame_append(bytes, payload);
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// True once the peer has closed the connection (read returns 0 or an error), within 10 s.
bool closed_by_peer(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
    if (n < 0) return false;  // timed out: still open
  }
}

// A raw connection that completes the handshake with `secret`.
int authenticated_raw(uint16_t port, const std::string& secret) {
  int fd = connect_raw(port);
  const std::string server_nonce = hello_decode(read_frame(fd));
  const std::string nonce = random_bytes(kNonceBytes);
  EXPECT_TRUE(send_frame(fd, proof_encode(nonce, auth_proof(secret, Role::Client, server_nonce, nonce))));
  auto [accepted, proof] = verdict_decode(read_frame(fd));
  EXPECT_TRUE(accepted);
  return fd;
}

// The most memory this process ever had resident (VmHWM), in bytes.
int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

}  // namespace

TEST(JobStore, OperationsMeanWhatTheContractSays) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient c("127.0.0.1", server.port(), kSecret, 5s);
  EXPECT_EQ(c.try_get("a"), std::nullopt);
  c.set("a", std::string("\0x\xff", 3));
  EXPECT_EQ(c.try_get("a"), std::string("\0x\xff", 3));
  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -7), -2);
  EXPECT_EQ(c.try_get("n"), "-2");
  EXPECT_THROW(c.add("a", 1), cadre::Error);  // not an integer
  EXPECT_EQ(c.compare_set("cas", "", "one"), "one");
  EXPECT_EQ(c.compare_set("cas", "", "two"), "one");
  EXPECT_EQ(c.compare_set("cas", "one", "three"), "three");
  EXPECT_EQ(c.compare_set("absent", "x", "y"), std::nullopt);
  EXPECT_TRUE(c.check({"a", "n"}));
  EXPECT_FALSE(c.check({"a", "nope"}));
  EXPECT_EQ(c.num_keys(), 3);
  EXPECT_TRUE(c.erase("cas"));
  EXPECT_FALSE(c.erase("cas"));
  EXPECT_THROW(c.get("late", 100ms), cadre::Error);
  EXPECT_THROW(c.wait({"a", "late"}, 100ms), cadre::Error);
}

// A session key lives as long as the client that set it: an agent's "alive" mark vanishes the
// moment its process (and so its connection) goes, while its plain keys stay.
TEST(JobStore, SessionKeysGoWithTheClientThatSetThem) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient watcher("127.0.0.1", server.port(), kSecret, 5s);
  {
    StoreClient agent("127.0.0.1", server.port(), kSecret, 5s);
    agent.set_session("alive/0", "h0");
    agent.set("plain", "x");
    agent.set_session("alive/1", "h0");  // the same session connection, a second key
    EXPECT_EQ(agent.try_get("alive/0"), "h0");  // other calls go on other connections
    EXPECT_EQ(watcher.try_get("alive/0"), "h0");
    EXPECT_EQ(watcher.try_get("alive/1"), "h0");
  }
  // The server sees the connections close in its own time: wait for it, boundedly.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((watcher.try_get("alive/0") || watcher.try_get("alive/1")) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(watcher.try_get("alive/0"), std::nullopt);
  EXPECT_EQ(watcher.try_get("alive/1"), std::nullopt);
  EXPECT_EQ(watcher.try_get("plain"), "x");
}

// One client, two threads: a blocking wait must not hold up the call that ends it.
TEST(JobStore, AWaitInOneThreadDoesNotBlockAnotherThreadsCalls) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient c("127.0.0.1", server.port(), kSecret, 5s);
  std::string got;
  std::thread waiter([&] { got = c.get("key", 5000ms); });
  std::this_thread::sleep_for(50ms);  // let it park (the result does not depend on it)
  c.set("key", "value");
  waiter.join();
  EXPECT_EQ(got, "value");
}

// A client with another secret is refused, learns why, and writes nothing.
TEST(JobStore, AClientWithoutTheSecretIsRefusedAndChangesNothing) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient good("127.0.0.1", server.port(), kSecret, 5s);
  good.set("restarts", "0");
  try {
    StoreClient bad("127.0.0.1", server.port(), "another-secret-0123456789", 5s);
    FAIL() << "a client with the wrong secret was accepted";
  } catch (const AuthenticationFailed& e) {
    EXPECT_NE(std::string(e.what()).find("wrong job secret"), std::string::npos) << e.what();
  }
  // A raw client skipping the handshake: its "request" is taken for a proof and refused.
  int fd = connect_raw(server.port());
  read_frame(fd);  // greeting
  Request r;
  r.op = Op::Set;
  r.keys = {"restarts"};
  r.value = "1000";
  send_frame(fd, request_encode(r));
  EXPECT_TRUE(closed_by_peer(fd));
  ::close(fd);
  EXPECT_EQ(good.try_get("restarts"), "0");
  EXPECT_EQ(good.num_keys(), 1);
  EXPECT_EQ(server.refused(), 2);
}

// Frames longer than the bound are refused as soon as their length is read: before
// authentication the bound is a handshake message's size, after it 32 MiB. The test streams
// 64 MiB behind each prefix; the server must neither buffer it nor stop serving.
TEST(JobStore, AHugeLengthPrefixIsRefusedWithoutTheServerGrowing) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient c("127.0.0.1", server.port(), kSecret, 5s);
  const int64_t before = peak_rss_bytes();
  const std::string chunk(1 << 20, 'x');
  for (bool authenticated : {false, true}) {
    int fd = authenticated ? authenticated_raw(server.port(), kSecret) : connect_raw(server.port());
    if (!authenticated) read_frame(fd);
    const uint32_t huge = 0xfffffff0u;
    ASSERT_EQ(::send(fd, &huge, 4, MSG_NOSIGNAL), 4);
    for (int i = 0; i < 64; ++i)
      if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;  // closed on us: fine
    EXPECT_TRUE(closed_by_peer(fd)) << (authenticated ? "after" : "before") << " authentication";
    ::close(fd);
  }
  EXPECT_LT(peak_rss_bytes() - before, 16 << 20);
  c.set("still", "serving");
  EXPECT_EQ(c.try_get("still"), "serving");
  EXPECT_EQ(server.refused(), 2);
}

// The client checks the server's proof too: a program on the port that accepts anything (and
// could hand out forged peer addresses) is refused.
TEST(JobStore, AServerThatCannotProveTheSecretIsRefused) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread impostor([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    send_frame(fd, hello_encode(random_bytes(kNonceBytes)));
    read_frame(fd);                                                  // the client's proof
    send_frame(fd, verdict_encode(true, std::string(kProofBytes, '\0')));  // "accepted", no real proof
    read_frame(fd);
    ::close(fd);
  });
  try {
    StoreClient c("127.0.0.1", ntohs(addr.sin_port), kSecret, 5s);
    FAIL() << "accepted a server that does not know the secret";
  } catch (const AuthenticationFailed& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove"), std::string::npos) << e.what();
  }
  impostor.join();
  ::close(listener);
}

TEST(JobStore, AProgramThatIsNotAStoreGivesAClearError) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);  // accepts (backlog) and never says a word
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  try {
    StoreClient c("127.0.0.1", ntohs(addr.sin_port), kSecret, 500ms);
    FAIL() << "connected to a silent program";
  } catch (const NoGreeting& e) {
    EXPECT_NE(std::string(e.what()).find("did not answer as a Cadre job store within 500 ms"), std::string::npos)
        << e.what();
  }
  ::close(listener);
}

// More silent connections than the store holds at once (4,096), each inside its handshake
// window, must not lock a real rank out: the oldest unproven ones are dropped for newcomers.
TEST(JobStore, AFloodOfSilentConnectionsDoesNotLockOutARealRank) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;  // both ends of every connection live in this process
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  constexpr int kSilent = 4200;
  ASSERT_GE(files.rlim_cur, rlim_t(2 * kSilent + 100)) << "the open-files hard limit is too low for this test";
  StoreServer server("127.0.0.1", 0, kSecret);
  std::vector<int> silent;
  for (int i = 0; i < kSilent; ++i) silent.push_back(connect_raw(server.port()));
  StoreClient rank("127.0.0.1", server.port(), kSecret, 5s);
  rank.set("k", "v");
  EXPECT_EQ(rank.try_get("k"), "v");
  EXPECT_TRUE(closed_by_peer(silent.front())) << "the oldest silent connection was dropped";
  EXPECT_GE(server.refused(), kSilent - 200);
  for (int fd : silent) ::close(fd);
}

TEST(JobStore, ListenAddressFollowsTheHostPeersUse) {
  EXPECT_EQ(listen_address_for("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(listen_address_for("localhost"), "127.0.0.1");
  EXPECT_EQ(listen_address_for("192.0.2.1"), "");  // TEST-NET: not this machine
  EXPECT_EQ(listen_address_for("no-such-host.invalid"), "");
}

TEST(JobSecret, SourcesAndChecks) {
  EXPECT_EQ(job_secret_generate().size(), 64u);
  EXPECT_NE(job_secret_generate(), job_secret_generate());
  EXPECT_EQ(job_secret_check("0123456789abcdef\n", "t"), "0123456789abcdef");
  EXPECT_THROW(job_secret_check("short", "t"), cadre::ConfigError);
  // Handed over as a sealed memfd: readable (from offset 0, by anyone holding it), not writable.
  int fd = job_secret_fd_create(kSecret);
  ::fcntl(fd, F_SETFD, 0);  // as a worker holds it: the agent cleared close-on-exec before exec
  ::setenv(kSecretFdEnv, std::to_string(fd).c_str(), 1);
  EXPECT_EQ(job_secret_from_environment(), kSecret);
  EXPECT_EQ(job_secret_from_environment(), kSecret) << "read once, kept";
  EXPECT_LT(::pwrite(fd, "x", 1, 0), 0);
  // What a program this process starts sees: neither the variable nor the descriptor.
  EXPECT_EQ(std::getenv(kSecretFdEnv), nullptr);
  const std::string probe = "echo \"variable:${" + std::string(kSecretFdEnv) + ":-unset}\"; readlink /proc/$$/fd/" +
                            std::to_string(fd) + " || echo descriptor:closed";
  std::string child;
  if (FILE* p = ::popen(probe.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) child += buf;
    ::pclose(p);
  }
  EXPECT_NE(child.find("variable:unset"), std::string::npos) << child;
  EXPECT_NE(child.find("descriptor:closed"), std::string::npos) << child;
  EXPECT_EQ(child.find("cadre-job-secret"), std::string::npos) << child;
  ::close(fd);
}
