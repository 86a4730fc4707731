// The agent <-> worker lines of in-memory recovery (rdzv/membership.h): a membership survives
// the round trip, malformed lines are refused naming what is wrong, lost-peer reports and
// round-lost notices are told apart from memberships, and lines split across reads come out whole.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include "core/error.h"
#include "rdzv/membership.h"

using namespace cadre::rdzv;

TEST(Membership, LineRoundTrips) {
  Membership m{7, 2, 3, 4, "10.77.0.11", 40123};
  const std::string line = membership_to_line(m);
  ASSERT_EQ(line.back(), '\n');
  Membership back = membership_parse(line.substr(0, line.size() - 1));
  EXPECT_EQ(back.round, 7);
  EXPECT_EQ(back.restart_count, 2);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.master_addr, "10.77.0.11");
  EXPECT_EQ(back.master_port, 40123);
  EXPECT_FALSE(lost_peer_parse(line));  // a membership is no loss report
}

TEST(Membership, MalformedLinesAreRefusedNamingWhatIsWrong) {
  auto refused = [](const std::string& line) {
    try {
      membership_parse(line);
    } catch (const cadre::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused("not json").find("is not JSON"), std::string::npos);
  EXPECT_NE(refused(R"({"round":1,"restart_count":0,"rank":0,"world_size":2,"master_addr":"a"})").find("master_port"),
            std::string::npos);
  EXPECT_NE(refused(R"({"round":1,"restart_count":0,"rank":2,"world_size":2,"master_addr":"a","master_port":1})")
                .find("rank outside the world"),
            std::string::npos);
  EXPECT_NE(refused(R"({"round":1,"restart_count":0,"rank":0,"world_size":2,"master_addr":"a","master_port":70000})")
                .find("not a port"),
            std::string::npos);
  EXPECT_NE(refused(R"({"round":"one","restart_count":0,"rank":0,"world_size":2,"master_addr":"a","master_port":1})"),
            "accepted");
}

TEST(Membership, LostPeerReportsCarryTheirRound) {
  const std::string line = lost_peer_line(5, 2, "connection reset by peer");
  auto lost = lost_peer_parse(line.substr(0, line.size() - 1));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->round, 5);
  EXPECT_NE(lost->reason.find("rank 2 lost a peer: connection reset by peer"), std::string::npos) << lost->reason;
  EXPECT_FALSE(lost_peer_parse("{\"lost\": \"no round\"}"));
  EXPECT_FALSE(lost_peer_parse("garbage"));
}

TEST(Membership, RoundLostLinesCarryTheirRoundAndAreNoOtherLine) {
  const std::string line = round_lost_line(4, "node h2 (group rank 2) stopped heartbeating");
  ASSERT_EQ(line.back(), '\n');
  auto lost = round_lost_parse(line.substr(0, line.size() - 1));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->round, 4);
  EXPECT_EQ(lost->reason, "node h2 (group rank 2) stopped heartbeating");
  EXPECT_FALSE(lost_peer_parse(line));
  EXPECT_FALSE(round_lost_parse(lost_peer_line(4, 1, "reset")));
  EXPECT_FALSE(round_lost_parse(membership_to_line(Membership{4, 0, 0, 2, "a", 1})));
  EXPECT_FALSE(round_lost_parse("{\"round_lost\": \"no round\"}"));
  EXPECT_FALSE(round_lost_parse("garbage"));
}

TEST(Membership, LinesSplitAcrossWritesComeOutWholeAndAClosedPeerIsSeen) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ::fcntl(pair[0], F_SETFL, O_NONBLOCK);
  LineReader reader(pair[0]);
  EXPECT_TRUE(reader.read_available().empty());  // nothing yet, and no block
  ASSERT_EQ(::write(pair[1], "first\nsec", 9), 9);
  bool closed = false;
  auto lines = reader.read_available(&closed);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "first");
  ASSERT_EQ(::write(pair[1], "ond\n", 4), 4);
  ::close(pair[1]);
  lines = reader.read_available(&closed);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "second");
  EXPECT_TRUE(closed);
  ::close(pair[0]);
}
