// The rendezvous store of `cadre run` against a peer without the job secret. With c10d's
// TCPStore (what torchrun uses) anyone who reaches the port can bump `restarts` until the
// agents give up, advance the round forever, or send a length prefix that makes the server
// allocate it. Tried here with c10d's wire format and the job store's: nothing changes, the
// agent does not grow, and the job finishes as if nothing happened.
#include <gtest/gtest.h>

#include <memory>

#include "launch/launch_harness.h"
#include "launch/shell_worker.h"

using namespace launch_test;

namespace {

class StoreSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    marker = "cadre-store-security-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    reaper.marker = marker;
    script = dir.path + "/worker.sh";
    write_file(script, kWorkerScript);
    port = free_port();
  }
  // One single-node agent hosting the store on 127.0.0.1:port; its worker waits for `finish`.
  std::unique_ptr<Proc> start_agent() {
    auto agent = std::make_unique<Proc>(
        std::vector<std::string>{CADRE_BIN, "run", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port),
                                 "--monitor-interval", "0.05", "--log-dir", dir.path + "/logs", "--", "/bin/sh",
                                 script, marker, dir.path, "wait"},
        dir.path + "/agent.out");
    EXPECT_TRUE(wait_until([&] { return worker_ranks_started(dir.path, 1) == worker_all_ranks(1); }, 60))
        << agent->output();
    return agent;
  }
  // Lets the worker finish; the agent must then exit 0 with its one worker start.
  void expect_clean_finish(Proc& agent) {
    write_file(dir.path + "/finish", "");
    ASSERT_TRUE(agent.wait_exit(60)) << agent.output();
    EXPECT_EQ(agent.exit_code(), 0) << agent.output();
    EXPECT_EQ(worker_starts(dir.path).size(), 1u) << "the workers were restarted:\n" << agent.output();
  }
  // The most memory the process ever had resident (VmHWM): a buffer allocated for a length
  // and freed when the connection closes still shows.
  int64_t peak_rss_bytes(pid_t pid) {
    std::istringstream status(read_file("/proc/" + std::to_string(pid) + "/status"));
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    return -1;
  }

  TempDir dir;
  std::string marker, script;
  MarkerReaper reaper;
  int port = 0;
};

// Sends `bytes` on a fresh connection to 127.0.0.1:port, then `tail_mib` MiB of filler (or
// until the peer closes), and closes.
void send_raw(int port, const std::string& bytes, int tail_mib = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < tail_mib; ++i)
    if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;  // closed on us
  ::close(fd);
}

// c10d TCPStore's SET as its client sends it (checked against libtorch 1.13's server): query
// byte 0, then the key ("/"-prefixed) and the value, each after a 64-bit length.
std::string c10d_set(const std::string& key, const std::string& value) {
  std::string out(1, '\0');
  for (const std::string& s : {"/" + key, value}) {
    const uint64_t n = s.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    out += s;
  }
  return out;
}

}  // namespace

// Writes, as c10d's client would, `restarts` past --max-restarts and the round moved on: with
// an open store the agent would give up (exit 1), or restart its workers.
TEST_F(StoreSecurity, AClientWithoutTheSecretChangesNothing) {
  auto agent = start_agent();
  send_raw(port, c10d_set("cadre/none/g0/restarts", "1000") + c10d_set("cadre/none/g0/round", "7"));
  ASSERT_TRUE(wait_until([&] { return agent->output().find("refused a connection from 127.0.0.1") != std::string::npos; },
                         10))
      << agent->output();
  expect_clean_finish(*agent);
}

// A length prefix of 1 GiB (c10d's layout: a query byte and a 64-bit length) and of 4 GiB
// (the job store's 32-bit frame length), each followed by 32 MiB: the connection is closed at
// the prefix and the agent does not grow.
TEST_F(StoreSecurity, AHugeLengthPrefixIsRefusedWithoutTheAgentGrowing) {
  auto agent = start_agent();
  const int64_t before = peak_rss_bytes(agent->pid());
  std::string c10d_head(1, '\0');  // SET, then the key's length
  const uint64_t gib = uint64_t(1) << 30;
  c10d_head.append(reinterpret_cast<const char*>(&gib), 8);
  send_raw(port, c10d_head, 32);
  send_raw(port, std::string("\xf0\xff\xff\xff", 4), 32);
  const int64_t after = peak_rss_bytes(agent->pid());
  std::printf("agent peak RSS %.1f MiB before, %.1f MiB after\n", before / 1048576.0, after / 1048576.0);
  EXPECT_LT(after - before, 64 << 20);
  expect_clean_finish(*agent);
}
