// The worker's end of in-memory recovery's channel (train/membership_channel.h) over a real
// socket pair: the agent's word that the current round lost a node reaches the abort handler
// while the worker's own thread is elsewhere (it may wait in a collective), a notice for
// another round does not, announced rounds are queued and taken in order, and a bad line or a
// closed agent is an error naming it.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "core/error.h"
#include "train/membership_channel.h"

namespace {

using cadre::MembershipChannel;
using namespace cadre::rdzv;

class MembershipChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    agent_ = fds[0];
    channel_ = std::make_unique<MembershipChannel>(fds[1], /*round=*/3);
  }
  void TearDown() override {
    channel_.reset();
    if (agent_ >= 0) ::close(agent_);
  }
  void agent_says(const std::string& line) { ASSERT_EQ(::write(agent_, line.data(), line.size()), ssize_t(line.size())); }
  // The channel's thread reads lines in order: once this membership is queued, every line
  // written before it was read too.
  void announce(int64_t round, int rank) {
    agent_says(membership_to_line(Membership{round, 0, rank, 2, "10.0.0.1", 29400}));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!channel_->pending() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_TRUE(channel_->pending()) << "the announced round " << round << " never arrived";
  }

  int agent_ = -1;
  std::unique_ptr<MembershipChannel> channel_;
};

TEST_F(MembershipChannelTest, LostNodeOfTheCurrentRoundReachesTheAbortHandler) {
  std::promise<std::string> aborted;
  channel_->set_abort_handler([&](const std::string& reason) { aborted.set_value(reason); });
  agent_says(round_lost_line(3, "node h2 (group rank 2) stopped heartbeating"));
  auto reason = aborted.get_future();
  ASSERT_EQ(reason.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "the handler was not called";
  EXPECT_NE(reason.get().find("node h2 (group rank 2) stopped heartbeating"), std::string::npos);
  channel_->set_abort_handler(nullptr);
}

TEST_F(MembershipChannelTest, NoticesOfRoundsThisWorkerLeftAreIgnored) {
  std::atomic<int> calls{0};
  channel_->set_abort_handler([&](const std::string&) { ++calls; });
  agent_says(round_lost_line(2, "an earlier round"));
  announce(4, 1);
  EXPECT_EQ(calls.load(), 0) << "a notice for round 2 aborted round 3";
  cadre::comm::JobEnv env = channel_->next(cadre::comm::JobEnv{}, 10);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(channel_->round(), 4);
  agent_says(round_lost_line(3, "the round this worker left"));
  announce(5, 0);
  EXPECT_EQ(calls.load(), 0) << "a notice for round 3 aborted round 4";
  channel_->set_abort_handler(nullptr);
}

// The trainer of a round registers its handler only once its group is built: a node lost
// meanwhile must still end that round's collectives, not leave them to their deadline.
TEST_F(MembershipChannelTest, ANoticeThatCameBeforeTheHandlerAbortsWhenItIsSet) {
  agent_says(round_lost_line(3, "node h1 stopped heartbeating"));
  announce(4, 0);  // read in order: the notice was read before
  std::string reason;
  channel_->set_abort_handler([&](const std::string& r) { reason = r; });
  EXPECT_NE(reason.find("node h1 stopped heartbeating"), std::string::npos) << "not aborted at registration";
  channel_->set_abort_handler(nullptr);
}

// The agent announces a round and says it lost a node before this worker took it: the notice
// applies once the round is taken, and a later round taken instead does not inherit it.
TEST_F(MembershipChannelTest, ANoticeForARoundNotYetTakenAbortsItOnceTaken) {
  // `marker` notices of the current round tell the lines before them were read (in order).
  std::atomic<int> other_calls{0};
  std::promise<void> marker;
  auto until_marker = [&] {
    channel_->set_abort_handler([&](const std::string& r) {
      if (r.find("marker") != std::string::npos) marker.set_value();
      else ++other_calls;
    });
    other_calls = 0;  // a notice of the current round, applied at registration, is not one of them
  };
  auto take_round = [&](int64_t round) {
    ASSERT_EQ(marker.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
    channel_->set_abort_handler(nullptr);
    channel_->next(cadre::comm::JobEnv{}, 10);
    ASSERT_EQ(channel_->round(), round);
    marker = std::promise<void>();
  };
  auto reason_at_registration = [&] {
    std::string reason;
    channel_->set_abort_handler([&](const std::string& r) { reason = r; });
    channel_->set_abort_handler(nullptr);
    return reason;
  };

  until_marker();
  agent_says(membership_to_line(Membership{4, 0, 1, 2, "10.0.0.1", 29400}));
  agent_says(round_lost_line(4, "node h2 stopped heartbeating"));
  agent_says(round_lost_line(3, "marker"));
  take_round(4);
  EXPECT_EQ(other_calls.load(), 0) << "round 3 aborted for round 4's loss";
  EXPECT_NE(reason_at_registration().find("node h2 stopped heartbeating"), std::string::npos);

  until_marker();
  agent_says(membership_to_line(Membership{5, 0, 1, 2, "10.0.0.1", 29400}));
  agent_says(round_lost_line(4, "marker"));
  take_round(5);
  EXPECT_EQ(reason_at_registration(), "") << "round 5 aborted for round 4's loss";

  // A later notice of the current round does not make the channel forget the announced one's.
  until_marker();
  agent_says(membership_to_line(Membership{6, 0, 1, 2, "10.0.0.1", 29400}));
  agent_says(round_lost_line(6, "node h0 stopped heartbeating"));
  agent_says(round_lost_line(5, "marker"));
  take_round(6);
  EXPECT_NE(reason_at_registration().find("node h0 stopped heartbeating"), std::string::npos);
  EXPECT_EQ(other_calls.load(), 0);
}

TEST_F(MembershipChannelTest, TheNewestAnnouncedRoundIsTakenAndReportsNameTheCurrentOne) {
  // Lines are read in order: once the notice after them reached the handler, both rounds are queued.
  std::promise<std::string> read_up_to_here;
  channel_->set_abort_handler([&](const std::string& reason) { read_up_to_here.set_value(reason); });
  agent_says(membership_to_line(Membership{4, 0, 1, 2, "10.0.0.1", 29400}));
  agent_says(membership_to_line(Membership{5, 0, 0, 2, "10.0.0.1", 29400}));
  agent_says(round_lost_line(3, "marker"));
  ASSERT_EQ(read_up_to_here.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  channel_->set_abort_handler(nullptr);
  cadre::comm::JobEnv base;
  base.secret = "kept";
  cadre::comm::JobEnv env = channel_->next(base, 10);
  EXPECT_EQ(channel_->last().round, 5);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.master_port, 29400);
  EXPECT_EQ(env.secret, "kept");
  EXPECT_FALSE(channel_->pending());
  channel_->report_lost(0, "connection reset");
  char buf[256] = {};
  ASSERT_GT(::read(agent_, buf, sizeof buf - 1), 0);
  auto lost = lost_peer_parse(std::string(buf).substr(0, std::string(buf).find('\n')));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->round, 5);
}

TEST_F(MembershipChannelTest, ABadLineIsAnErrorNamingIt) {
  agent_says("{\"round\": 4}\n");
  try {
    channel_->next(cadre::comm::JobEnv{}, 30);
    FAIL() << "a membership without fields was taken";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no 'restart_count'"), std::string::npos) << e.what();
  }
}

TEST_F(MembershipChannelTest, AGoneAgentIsAnError) {
  ::close(agent_);
  agent_ = -1;
  try {
    channel_->next(cadre::comm::JobEnv{}, 30);
    FAIL() << "no error with the agent gone";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the agent closed the membership channel"), std::string::npos) << e.what();
  }
}

}  // namespace
