// Rendezvous rounds against an in-memory KvStore, with threads playing agents: closing at MAX or
// after the last call at MIN, rank assignment, late joiners, failure accounting, join timeout,
// and dead-peer detection.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "rdzv/rendezvous.h"

using namespace cadre::rdzv;

namespace {

class MemoryStore : public KvStore {
 public:
  struct Shared {
    std::mutex mutex;
    std::map<std::string, std::string> data;
    bool vanishing_sessions = false;  // as the job store: session keys go with their client
  };
  explicit MemoryStore(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  void set(const std::string& k, const std::string& v) override {
    std::lock_guard<std::mutex> l(shared_->mutex);
    shared_->data[k] = v;
  }
  std::optional<std::string> try_get(const std::string& k) override {
    std::lock_guard<std::mutex> l(shared_->mutex);
    auto it = shared_->data.find(k);
    if (it == shared_->data.end()) return std::nullopt;
    return it->second;
  }
  int64_t add(const std::string& k, int64_t d) override {
    std::lock_guard<std::mutex> l(shared_->mutex);
    auto& v = shared_->data[k];
    int64_t n = (v.empty() ? 0 : std::stoll(v)) + d;
    v = std::to_string(n);
    return n;
  }
  std::string compare_set(const std::string& k, const std::string& expected, const std::string& desired) override {
    std::lock_guard<std::mutex> l(shared_->mutex);
    auto it = shared_->data.find(k);
    std::string current = it == shared_->data.end() ? "" : it->second;
    if (current == expected) shared_->data[k] = desired;
    return shared_->data.count(k) ? shared_->data[k] : "";
  }
  std::string describe() const override { return "memory"; }
  bool session_keys_vanish_on_death() const override { return shared_->vanishing_sessions; }
  // A client's death, as the job store sees it: its session keys (here: those under `round`
  // with this join index) are gone.
  void kill_session(int64_t round, int64_t join_index) {
    std::lock_guard<std::mutex> l(shared_->mutex);
    const std::string suffix = "/r" + std::to_string(round) + "/alive/" + std::to_string(join_index);
    for (auto it = shared_->data.begin(); it != shared_->data.end();)
      it = it->first.size() >= suffix.size() && it->first.compare(it->first.size() - suffix.size(), suffix.size(), suffix) == 0
               ? shared_->data.erase(it)
               : std::next(it);
  }

  std::shared_ptr<Shared> shared_;
};

struct Cluster {
  std::shared_ptr<MemoryStore::Shared> shared = std::make_shared<MemoryStore::Shared>();
  RendezvousConfig config;
  Cluster(int64_t min_nodes, int64_t max_nodes) {
    config.run_id = "t";
    config.min_nodes = min_nodes;
    config.max_nodes = max_nodes;
    config.last_call_timeout_s = 0.2;
    config.join_timeout_s = 20;
    config.heartbeat_timeout_s = 0.3;
    config.poll_interval_s = 0.005;
  }
  std::unique_ptr<Rendezvous> agent() { return std::make_unique<Rendezvous>(std::make_unique<MemoryStore>(shared), config); }
};

NodeInfo node(const std::string& name, int64_t nproc = 1, int64_t node_rank = -1) {
  NodeInfo n;
  n.addr = "127.0.0.1";
  n.hostname = name;
  n.local_world_size = nproc;
  n.node_rank = node_rank;
  return n;
}

const auto kNever = [] { return false; };

}  // namespace

TEST(Rendezvous, ClosesAtMaxWithDistinctRanksAndConsistentOffsets) {
  Cluster c(3, 3);
  std::vector<std::future<Round>> joins;
  for (int i = 0; i < 3; ++i)
    joins.push_back(std::async(std::launch::async, [&c, i] {
      return c.agent()->join_next_round(node("n" + std::to_string(i), i + 1), kNever);
    }));
  std::vector<Round> rounds;
  for (auto& j : joins) rounds.push_back(j.get());
  std::set<int64_t> group_ranks;
  for (const auto& r : rounds) {
    EXPECT_EQ(r.number, 0);
    EXPECT_EQ(r.group_world_size(), 3);
    EXPECT_EQ(r.world_size(), 1 + 2 + 3);
    EXPECT_EQ(r.restart_count, 0);
    group_ranks.insert(r.group_rank);
    // Every agent sees the same membership order.
    for (int64_t g = 0; g < 3; ++g) EXPECT_EQ(r.nodes[g].hostname, rounds[0].nodes[g].hostname);
  }
  EXPECT_EQ(group_ranks, (std::set<int64_t>{0, 1, 2}));
  // Global rank ranges tile 0..5 without overlap.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& r : rounds) ranges.push_back({r.rank_offset(), r.nodes[r.group_rank].local_world_size});
  std::sort(ranges.begin(), ranges.end());
  int64_t next = 0;
  for (auto [offset, n] : ranges) {
    EXPECT_EQ(offset, next);
    next += n;
  }
  EXPECT_EQ(next, 6);
}

TEST(Rendezvous, ClosesWithMinNodesAfterTheLastCall) {
  Cluster c(2, 4);
  auto a = std::async(std::launch::async, [&] { return c.agent()->join_next_round(node("a"), kNever); });
  auto b = std::async(std::launch::async, [&] { return c.agent()->join_next_round(node("b"), kNever); });
  EXPECT_EQ(a.get().group_world_size(), 2);
  EXPECT_EQ(b.get().group_world_size(), 2);
}

TEST(Rendezvous, StaticRanksFollowNodeRank) {
  Cluster c(2, 2);
  c.config.rank_by_node_rank = true;
  auto one = std::async(std::launch::async, [&] { return c.agent()->join_next_round(node("one", 1, 1), kNever); });
  auto first = one.wait_for(std::chrono::milliseconds(50));  // rank 1 joins first
  EXPECT_EQ(first, std::future_status::timeout);
  auto zero = std::async(std::launch::async, [&] { return c.agent()->join_next_round(node("zero", 1, 0), kNever); });
  EXPECT_EQ(one.get().group_rank, 1);
  EXPECT_EQ(zero.get().group_rank, 0);
}

TEST(Rendezvous, LateJoinerIsCountedAndJoinsAfterScaleUp) {
  Cluster c(1, 2);
  auto a = c.agent();
  Round r0 = a->join_next_round(node("a"), kNever);
  EXPECT_EQ(r0.group_world_size(), 1);
  auto b = std::async(std::launch::async, [&] { return c.agent()->join_next_round(node("b"), kNever); });
  // The running agent sees one node waiting, then ends the round for a scale-up.
  RoundStatus status;
  for (int i = 0; i < 2000 && status.waiting_nodes == 0; ++i) {
    status = a->poll(r0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(status.waiting_nodes, 1);
  a->end_round(r0, "scale-up", false, "");
  Round r1 = a->join_next_round(node("a"), kNever);
  Round rb = b.get();
  EXPECT_EQ(r1.number, 1);
  EXPECT_EQ(rb.number, 1);
  EXPECT_EQ(r1.group_world_size(), 2);
  EXPECT_EQ(r1.restart_count, 0);  // membership changes are not failures
  EXPECT_TRUE(a->poll(r1).ended == false);
}

TEST(Rendezvous, FailureReportedByTwoAgentsCountsOnceAndIsRecorded) {
  Cluster c(2, 2);
  auto a = c.agent(), b = c.agent();
  auto ra = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  Round rb = b->join_next_round(node("b"), kNever);
  Round r = ra.get();
  a->end_round(r, "rank 0 failed", true, R"({"rank":0})");
  b->end_round(rb, "rank 1 failed", true, R"({"rank":1})");
  EXPECT_EQ(a->restart_count(), 1);
  EXPECT_EQ(a->last_failure(), R"({"rank":0})");
  RoundStatus s = b->poll(rb);
  EXPECT_TRUE(s.ended);
  EXPECT_EQ(s.end_reason, "rank 0 failed");
  auto next = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  Round nb = b->join_next_round(node("b"), kNever);
  EXPECT_EQ(nb.number, 1);
  EXPECT_EQ(nb.restart_count, 1);
  EXPECT_EQ(next.get().restart_count, 1);
}

TEST(Rendezvous, JoinTimeoutNamesTheShortfall) {
  Cluster c(2, 2);
  c.config.join_timeout_s = 0.2;
  try {
    c.agent()->join_next_round(node("alone"), kNever);
    FAIL() << "expected a join timeout";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 1 of the minimum 2 nodes joined within 0.2 s"), std::string::npos)
        << e.what();
  }
}

TEST(Rendezvous, InterruptedJoinThrowsInterrupted) {
  Cluster c(2, 2);
  EXPECT_THROW(c.agent()->join_next_round(node("a"), [] { return true; }), Rendezvous::Interrupted);
}

TEST(Rendezvous, PeerWithStalledHeartbeatIsReportedDead) {
  Cluster c(2, 2);
  auto a = c.agent(), b = c.agent();
  auto ra = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  Round rb = b->join_next_round(node("b"), kNever);
  Round r = ra.get();
  // Both beat for a while: nobody is dead.
  for (int i = 0; i < 20; ++i) {
    a->heartbeat(r);
    b->heartbeat(rb);
    EXPECT_TRUE(a->poll(r).dead.empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // b stops beating: a reports b's group rank.
  RoundStatus s;
  for (int i = 0; i < 400 && s.dead.empty(); ++i) {
    a->heartbeat(r);
    s = a->poll(r);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(s.dead.size(), 1u);
  EXPECT_EQ(s.dead[0], rb.group_rank);
}

// With a store whose session keys vanish with their client (the job store), a member that died
// is reported at once, without a heartbeat deadline, and the survivors re-form as soon as both
// have joined, without waiting out the last call for it.
TEST(Rendezvous, SurvivorsReformAtOnceWhenAMembersSessionVanished) {
  Cluster c(2, 3);
  c.shared->vanishing_sessions = true;
  c.config.last_call_timeout_s = 30;  // the survivors must not wait for it
  c.config.heartbeat_timeout_s = 30;
  auto a = c.agent(), b = c.agent(), d = c.agent();
  auto fa = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  auto fb = std::async(std::launch::async, [&] { return b->join_next_round(node("b"), kNever); });
  Round rd = d->join_next_round(node("d"), kNever);
  Round ra = fa.get(), rb = fb.get();
  MemoryStore(c.shared).kill_session(0, rd.join_index);
  RoundStatus s = a->poll(ra);
  ASSERT_EQ(s.dead.size(), 1u);
  EXPECT_EQ(s.dead[0], rd.group_rank);
  EXPECT_NE(s.dead_why.find("closed"), std::string::npos) << s.dead_why;
  a->end_round(ra, "d is gone", false, "");
  fa = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  fb = std::async(std::launch::async, [&] { return b->join_next_round(node("b"), kNever); });
  ASSERT_EQ(fa.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the survivors waited for the dead";
  Round na = fa.get(), nb = fb.get();
  EXPECT_EQ(na.number, 1);
  EXPECT_EQ(na.group_world_size(), 2);
  EXPECT_EQ(nb.group_world_size(), 2);
}

// A member behind a cut link keeps its session (nothing closes its connection) and only stops
// heartbeating: once a survivor declares it dead, the survivors re-form without waiting out the
// last call for it either.
TEST(Rendezvous, SurvivorsReformAtOnceWhenASilentMemberWasDeclaredDead) {
  Cluster c(2, 3);
  c.shared->vanishing_sessions = true;
  c.config.last_call_timeout_s = 30;  // the survivors must not wait for it
  auto a = c.agent(), b = c.agent(), d = c.agent();
  auto fa = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  auto fb = std::async(std::launch::async, [&] { return b->join_next_round(node("b"), kNever); });
  Round rd = d->join_next_round(node("d"), kNever);
  Round ra = fa.get(), rb = fb.get();
  RoundStatus s;  // a and b beat, d is silent with its session open
  for (int i = 0; i < 400 && s.dead.empty(); ++i) {
    a->heartbeat(ra);
    b->heartbeat(rb);
    s = a->poll(ra);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(s.dead, std::vector<int64_t>{rd.group_rank});
  EXPECT_EQ(s.dead_why, "stopped heartbeating");
  a->declare_dead(ra, s.dead, s.dead_why);
  a->end_round(ra, "d stopped heartbeating", false, "");
  fa = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  fb = std::async(std::launch::async, [&] { return b->join_next_round(node("b"), kNever); });
  ASSERT_EQ(fa.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the survivors waited for the silent";
  EXPECT_EQ(fa.get().group_world_size(), 2);
  EXPECT_EQ(fb.get().group_world_size(), 2);
}

// The rule waits for every member that is still alive: one that has not rejoined yet holds the
// round until the last call, as before.
TEST(Rendezvous, ALiveMemberNotYetBackHoldsTheRoundUntilTheLastCall) {
  Cluster c(2, 2);
  c.shared->vanishing_sessions = true;
  c.config.last_call_timeout_s = 0.5;
  auto a = c.agent(), b = c.agent();
  auto fa = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  Round rb = b->join_next_round(node("b"), kNever);
  Round ra = fa.get();
  a->end_round(ra, "scale-down test", false, "");
  c.config.min_nodes = 1;  // a alone may go on, once the last call has passed
  const auto t0 = std::chrono::steady_clock::now();
  Round again = c.agent()->join_next_round(node("a"), kNever);  // b is alive but does not come back
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(again.group_world_size(), 1);
  EXPECT_GE(waited, c.config.last_call_timeout_s) << "closed without waiting for live member " << rb.group_rank;
}

TEST(Rendezvous, LateJoinerLeavesWhenTheJobFinishes) {
  Cluster c(1, 1);
  auto a = c.agent();
  Round r = a->join_next_round(node("a"), kNever);
  auto late = std::async(std::launch::async, [&] { c.agent()->join_next_round(node("b"), kNever); });
  // The group is full (MAX 1): the late agent waits, counted as waiting, until the job finishes.
  RoundStatus status;
  for (int i = 0; i < 2000 && status.waiting_nodes == 0; ++i) {
    status = a->poll(r);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(status.waiting_nodes, 1);
  a->mark_done(r);
  EXPECT_TRUE(a->all_done(r));
  a->mark_job_finished(r);
  EXPECT_THROW(late.get(), Rendezvous::JobFinished);
}

TEST(Rendezvous, GroupRanksStayWithTheirNodesAcrossRounds) {
  Cluster c(2, 2);
  auto a = c.agent(), b = c.agent();
  NodeInfo na = node("a"), nb = node("b");
  auto fa = std::async(std::launch::async, [&] { return a->join_next_round(na, kNever); });
  Round rb = b->join_next_round(nb, kNever);
  Round ra = fa.get();
  a->end_round(ra, "membership", false, "");
  na.previous_group_rank = ra.group_rank;
  nb.previous_group_rank = rb.group_rank;
  // The node that had group rank 1 joins round 1 first; it still gets group rank 1.
  auto& first = ra.group_rank == 1 ? a : b;
  auto& second = ra.group_rank == 1 ? b : a;
  NodeInfo& first_info = ra.group_rank == 1 ? na : nb;
  NodeInfo& second_info = ra.group_rank == 1 ? nb : na;
  auto f1 = std::async(std::launch::async, [&] { return first->join_next_round(first_info, kNever); });
  auto joined = [&] {
    std::lock_guard<std::mutex> l(c.shared->mutex);
    return c.shared->data["cadre/t/g0/r1/joined"] == "1";
  };
  for (int i = 0; i < 2000 && !joined(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(joined());
  Round r2 = second->join_next_round(second_info, kNever);
  Round r1 = f1.get();
  EXPECT_EQ(r1.group_rank, 1);
  EXPECT_EQ(r2.group_rank, 0);
}

TEST(Rendezvous, WaitingForTheMasterOfAnEndedRoundSaysRoundEnded) {
  Cluster c(2, 2);
  auto a = c.agent(), b = c.agent();
  auto fa = std::async(std::launch::async, [&] { return a->join_next_round(node("a"), kNever); });
  Round rb = b->join_next_round(node("b"), kNever);
  Round ra = fa.get();
  Round& rank0 = ra.group_rank == 0 ? ra : rb;
  Round& rank1 = ra.group_rank == 0 ? rb : ra;
  auto& agent1 = ra.group_rank == 0 ? b : a;
  // Group rank 0 ends the round without publishing (as if it failed at once).
  (ra.group_rank == 0 ? a : b)->end_round(rank0, "gone", false, "");
  EXPECT_THROW(agent1->wait_master(rank1, kNever), Rendezvous::RoundEnded);
}

// A node record carries its agent's liveness port; a record from before it (no field) reads as
// "none" (0), and a value that is no port is refused, naming the field.
TEST(NodeRecord, CarriesTheLivenessPort) {
  NodeInfo n = node("a", 2);
  n.pid = 77;
  n.liveness_port = 40123;
  const NodeInfo back = node_info_from_json(node_info_to_json(n));
  EXPECT_EQ(back.liveness_port, 40123);
  EXPECT_EQ(back.pid, 77);
  EXPECT_EQ(back.local_world_size, 2);
  const std::string old = R"({"addr":"10.0.0.1","hostname":"h","local_world_size":1,"node_rank":-1,"pid":5})";
  EXPECT_EQ(node_info_from_json(old).liveness_port, 0);
  try {
    node_info_from_json(R"({"addr":"10.0.0.1","hostname":"h","local_world_size":1,"node_rank":-1,"pid":5,"liveness_port":70000})");
    FAIL() << "a port above 65535 was accepted";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("liveness_port"), std::string::npos) << e.what();
  }
}
