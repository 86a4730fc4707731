// EtcdStore against a real etcd: session keys vanish when their owner dies (lease expiry) and
// stay while it lives (keep-alive); closing revokes at once; watches wake waiters (also for a
// change between read and wait); a dead first endpoint fails over; an add whose answer is lost
// and which is repeated on another endpoint counts once; https with the right CA works and a
// wrong one fails clearly; unreachable clusters, bad endpoint syntax and bad credentials give
// clear errors. Rendezvous over etcd: a reused run id starts a fresh job generation; stale,
// unclosed and half-dead rounds are skipped; a peer whose lease ends is reported dead.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "rdzv/endpoint.h"
#include "rdzv/etcd_client.h"
#include "rdzv/etcd_store.h"
#include "rdzv/liveness_port.h"
#include "rdzv/rendezvous.h"
#include "support/etcd_cluster.h"
#include "support/process.h"

using namespace cadre::rdzv;
using cadre::seconds_since;
using cadre::test::EtcdCluster;

namespace {

bool wait_until(const std::function<bool()>& cond, double timeout_s) {
  auto start = std::chrono::steady_clock::now();
  while (!cond()) {
    if (seconds_since(start) > timeout_s) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

EtcdOptions options(const std::string& endpoints, double timeout_s = 10) {
  EtcdOptions o;
  o.endpoints = etcd_endpoints_parse(endpoints);
  o.timeout_s = timeout_s;
  o.request_timeout_s = 2;
  return o;
}

// A loopback port nobody listens on.
std::string dead_endpoint() { return "127.0.0.1:" + std::to_string(free_port("127.0.0.1")); }

TEST(EtcdStore, SessionKeyLivesWhileItsOwnerLivesAndVanishesWithinTheTtlWhenItDies) {
  EtcdCluster etcd;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();  // before this process starts any thread
  if (child == 0) {
    auto store = etcd_store_open(options(etcd.endpoints()), 2);
    store->set_session_key("s/alive", "child");
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();  // keeps the lease alive until SIGKILLed
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  auto observer = etcd_store_open(options(etcd.endpoints()), 2);
  ASSERT_EQ(observer->try_get("s/alive"), "child");
  // For one and a half TTLs (keep-alives every TTL/3): the key stays.
  auto start = std::chrono::steady_clock::now();
  while (seconds_since(start) < 3) {
    ASSERT_EQ(observer->try_get("s/alive"), "child") << "after " << seconds_since(start) << " s";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_until([&] { return !observer->try_get("s/alive"); }, 10));
  EXPECT_LT(seconds_since(killed), 2 + 1.5);  // TTL 2 s plus etcd's expiry granularity
}

TEST(EtcdStore, ClosingAStoreRevokesItsLeaseAtOnce) {
  EtcdCluster etcd;
  auto observer = etcd_store_open(options(etcd.endpoints()), 30);
  {
    auto owner = etcd_store_open(options(etcd.endpoints()), 30);
    owner->set_session_key("s/k", "v");
    EXPECT_EQ(observer->try_get("s/k"), "v");
  }
  EXPECT_EQ(observer->try_get("s/k"), std::nullopt);
}

TEST(EtcdStore, WatchWakesTheWaiterWhenAKeyUnderThePrefixChanges) {
  EtcdCluster etcd;
  auto waiter = etcd_store_open(options(etcd.endpoints()), 5);
  auto writer = etcd_store_open(options(etcd.endpoints()), 5);
  // A change that happened after the waiter's read but before it waits is not missed.
  EXPECT_EQ(waiter->try_get("w/flag"), std::nullopt);
  writer->set("w/flag", "early");
  auto start = std::chrono::steady_clock::now();
  waiter->wait_for_change("w/", 5, 0.05);
  EXPECT_LT(seconds_since(start), 1.0);
  // A change while it waits wakes it; a change elsewhere does not.
  EXPECT_EQ(waiter->try_get("w/flag"), "early");
  auto later = std::async(std::launch::async, [&] {
    writer->set("elsewhere/x", "1");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    writer->set("w/flag", "late");
  });
  start = std::chrono::steady_clock::now();
  waiter->wait_for_change("w/", 5, 0.05);
  double waited = seconds_since(start);
  later.get();
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 2.0);
  EXPECT_EQ(waiter->try_get("w/flag"), "late");
}

TEST(EtcdStore, DeadFirstEndpointFailsOverToTheNext) {
  EtcdCluster etcd;
  auto store = etcd_store_open(options(dead_endpoint() + "," + etcd.endpoints()), 2);
  store->set("f/a", "1");
  EXPECT_EQ(store->add("f/n", 2), 2);
  EXPECT_EQ(store->compare_set("f/a", "1", "2"), "2");
  EXPECT_EQ(store->try_get("f/a"), "2");
  store->set_session_key("f/alive", "x");
  EXPECT_EQ(store->try_get("f/alive"), "x");
}

TEST(EtcdStore, UnreachableEndpointsNameEveryEndpointAndTheLastError) {
  std::string a = dead_endpoint(), b = dead_endpoint();
  auto start = std::chrono::steady_clock::now();
  try {
    etcd_store_open(options(a + "," + b, 1), 2);
    FAIL() << "expected an error";
  } catch (const cadre::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("no endpoint answered within 1 s"), std::string::npos) << what;
    EXPECT_NE(what.find(a + " ("), std::string::npos) << what;
    EXPECT_NE(what.find(b + " ("), std::string::npos) << what;
    EXPECT_NE(what.find("last error"), std::string::npos) << what;
  }
  EXPECT_LT(seconds_since(start), 5);
}

TEST(EtcdStore, BadEndpointSyntaxIsAConfigError) {
  EXPECT_THROW(etcd_endpoints_parse("a:1,,b:2"), cadre::ConfigError);
  EXPECT_THROW(etcd_endpoints_parse("host:port"), cadre::ConfigError);
  EXPECT_THROW(etcd_endpoints_parse("https://h:2379,http://g:2379"), cadre::ConfigError);  // one scheme
  EXPECT_THROW(etcd_endpoints_parse("h:0"), cadre::ConfigError);
  EXPECT_THROW(etcd_endpoints_parse("h:1/v3"), cadre::ConfigError);
  bool tls = true;
  auto e = etcd_endpoints_parse("http://h1:1234,h2", &tls);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].str(), "h1:1234");
  EXPECT_EQ(e[1].str(), "h2:2379");
  EXPECT_FALSE(tls);
  e = etcd_endpoints_parse("https://h1:1234,h2", &tls);
  EXPECT_TRUE(tls);
  EXPECT_EQ(e[1].str(), "h2:2379");
}

TEST(EtcdStore, UserPasswordAuthWorksAndBadCredentialsSaySo) {
  EtcdCluster etcd;
  etcd.enable_auth("root", "rootpw");
  EtcdOptions good = options(etcd.endpoints(), 3);
  good.user = "root";
  good.password = "rootpw";
  auto store = etcd_store_open(good, 2);
  EXPECT_EQ(store->add("a/n", 3), 3);
  EtcdOptions bad = good;
  bad.password = "nope";
  try {
    etcd_store_open(bad, 2);
    FAIL() << "expected an authentication error";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("authentication as user 'root' failed"), std::string::npos) << e.what();
  }
  try {
    etcd_store_open(options(etcd.endpoints(), 3), 2);
    FAIL() << "expected an error without credentials";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("requires authentication"), std::string::npos) << e.what();
  }
}

RendezvousConfig one_node(const std::string& run_id) {
  RendezvousConfig c;
  c.run_id = run_id;
  c.min_nodes = c.max_nodes = 1;
  c.join_timeout_s = 20;
  c.heartbeat_timeout_s = 2;
  return c;
}

NodeInfo node(const std::string& name) {
  NodeInfo n;
  n.addr = "127.0.0.1";
  n.hostname = name;
  return n;
}

const auto kNever = [] { return false; };

TEST(EtcdRendezvous, ARunIdReusedAfterTheJobEndedStartsAFreshGeneration) {
  EtcdCluster etcd;
  {
    Rendezvous first(etcd_store_open(options(etcd.endpoints()), 2), one_node("reuse"));
    EXPECT_EQ(first.generation(), 0);
    Round r = first.join_next_round(node("a"), kNever);
    first.end_round(r, "crash", true, R"({"rank":0})");
    EXPECT_EQ(first.restart_count(), 1);
    Round r1 = first.join_next_round(node("a"), kNever);
    first.mark_done(r1);
    first.mark_job_finished(r1);
  }
  Rendezvous second(etcd_store_open(options(etcd.endpoints()), 2), one_node("reuse"));
  EXPECT_EQ(second.generation(), 1);
  Round r = second.join_next_round(node("a"), kNever);  // not "job already finished"
  EXPECT_EQ(r.number, 0);
  EXPECT_EQ(r.restart_count, 0);
  second.mark_job_failed();
  Rendezvous third(etcd_store_open(options(etcd.endpoints()), 2), one_node("reuse"));
  EXPECT_EQ(third.generation(), 2);
  EXPECT_EQ(third.restart_count(), 0);
  // Generation 0 was cleaned up; generation 1 stays for its late agents.
  auto probe = etcd_store_open(options(etcd.endpoints()), 2);
  EXPECT_EQ(probe->try_get("cadre/reuse/g0/round"), std::nullopt);
  EXPECT_NE(probe->try_get("cadre/reuse/g1/round"), std::nullopt);
}

TEST(EtcdRendezvous, AStaleRoundWhoseAgentIsGoneIsEndedByTheNextAgent) {
  EtcdCluster etcd;
  Round old;
  {
    // An agent joins and runs round 0, then disappears without ending it (its lease goes).
    Rendezvous gone(etcd_store_open(options(etcd.endpoints()), 2), one_node("stale"));
    old = gone.join_next_round(node("a"), kNever);
  }
  Rendezvous next(etcd_store_open(options(etcd.endpoints()), 2), one_node("stale"));
  auto start = std::chrono::steady_clock::now();
  Round r = next.join_next_round(node("a-restarted"), kNever);
  EXPECT_EQ(r.number, old.number + 1);
  EXPECT_LT(seconds_since(start), 3);
}

TEST(EtcdRendezvous, APeerWhoseLeaseEndsIsReportedDead) {
  EtcdCluster etcd;
  RendezvousConfig c = one_node("dead");
  c.min_nodes = c.max_nodes = 2;
  Rendezvous a(etcd_store_open(options(etcd.endpoints()), 2), c);
  auto b = std::make_unique<Rendezvous>(etcd_store_open(options(etcd.endpoints()), 2), c);
  auto fa = std::async(std::launch::async, [&] { return a.join_next_round(node("a"), kNever); });
  Round rb = b->join_next_round(node("b"), kNever);
  Round ra = fa.get();
  EXPECT_TRUE(a.poll(ra).dead.empty());
  int64_t b_rank = rb.group_rank;
  b.reset();  // b's lease is revoked: as good as expired
  RoundStatus s;
  ASSERT_TRUE(wait_until([&] { return !(s = a.poll(ra)).dead.empty(); }, 5));
  EXPECT_EQ(s.dead[0], b_rank);
}


TEST(EtcdRendezvous, AGoneAgentCountedInAFormingRoundDoesNotBlockTheMasterWait) {
  EtcdCluster etcd;
  RendezvousConfig c = one_node("ghost");
  c.min_nodes = c.max_nodes = 2;
  {
    // An agent of a killed job took join slot 0 of round 0 and wrote its records, then died.
    auto ghost = etcd_store_open(options(etcd.endpoints()), 2);
    Rendezvous layout(etcd_store_open(options(etcd.endpoints()), 2), c);  // creates gen and round
    ghost->add("cadre/ghost/g0/r0/joined", 1);
    ghost->set_session_key("cadre/ghost/g0/r0/alive/0", "ghost");
    ghost->set("cadre/ghost/g0/r0/node/0", node_info_to_json(node("ghost")));
  }
  Rendezvous a(etcd_store_open(options(etcd.endpoints()), 2), c);
  Round r = a.join_next_round(node("a"), kNever);  // closes round 0 with the ghost as group rank 0
  ASSERT_EQ(r.number, 0);
  ASSERT_EQ(r.group_rank, 1);
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(a.wait_master(r, kNever), Rendezvous::RoundEnded);
  EXPECT_LT(seconds_since(start), 2);
  // The next round forms with living agents only.
  Rendezvous b(etcd_store_open(options(etcd.endpoints()), 2), c);
  auto fb = std::async(std::launch::async, [&] { return b.join_next_round(node("b"), kNever); });
  Round r1 = a.join_next_round(node("a"), kNever);
  EXPECT_EQ(r1.number, 1);
  EXPECT_EQ(fb.get().number, 1);
}

// Round 0 of three agents: a, b, and c, whose records are written under a lease nobody renews or
// revokes (TTL 10 s), as an agent SIGKILLed mid-round leaves them; c's record names liveness port
// `c_port`. a ends round 0; returns the seconds a and b take to form round 1 without c.
double seconds_to_reform_without_c(const EtcdCluster& etcd, const std::string& run_id, uint16_t c_port,
                                   double last_call_s) {
  RendezvousConfig c = one_node(run_id);
  c.min_nodes = 2;
  c.max_nodes = 3;
  c.last_call_timeout_s = last_call_s;
  Rendezvous a(etcd_store_open(options(etcd.endpoints()), 10), c);  // creates the generation and round
  Rendezvous b(etcd_store_open(options(etcd.endpoints()), 10), c);
  const std::string r0 = "cadre/" + run_id + "/g0/r0/";
  {
    EtcdClient raw(options(etcd.endpoints()));
    auto records = etcd_store_open(options(etcd.endpoints()), 10);
    EXPECT_EQ(records->add(r0 + "joined", 1), 1);  // join index 0
    raw.put(r0 + "alive/0", "c", raw.lease_grant(10));
    NodeInfo dead = node("c");
    dead.pid = 4242;
    dead.liveness_port = c_port;
    records->set(r0 + "node/0", node_info_to_json(dead));
  }
  auto fb = std::async(std::launch::async, [&] { return b.join_next_round(node("b"), kNever); });
  Round ra = a.join_next_round(node("a"), kNever);
  EXPECT_EQ(ra.group_world_size(), 3);
  fb.get();
  a.end_round(ra, "c's workers are gone", true, R"({"rank":0})");
  const auto start = std::chrono::steady_clock::now();
  fb = std::async(std::launch::async, [&] { return b.join_next_round(node("b"), kNever); });
  Round r1 = a.join_next_round(node("a"), kNever);
  const double seconds = seconds_since(start);
  EXPECT_EQ(r1.number, 1);
  EXPECT_EQ(r1.group_world_size(), 2);
  EXPECT_EQ(fb.get().group_world_size(), 2);
  return seconds;
}

// A SIGKILLed agent's etcd lease lives until its TTL, so its session key still says alive; its
// liveness port, which the kernel closed as the process died, says gone. The survivors' round
// closes as soon as they joined: neither the lease (10 s) nor the last call (10 s) is waited for.
TEST(EtcdRendezvous, ARoundDoesNotWaitForAnAgentWhoseLivenessPortRefuses) {
  EtcdCluster etcd;
  const uint16_t closed_port = LivenessPort("127.0.0.1").port();  // listened, then closed
  EXPECT_LT(seconds_to_reform_without_c(etcd, "killed", closed_port, 10), 5);
}

// The control: an agent whose port still accepts may only be slow to come back (a restarted
// worker), so the round waits for it until the last call, as before.
TEST(EtcdRendezvous, ARoundWaitsForAnAgentWhoseLivenessPortAccepts) {
  EtcdCluster etcd;
  LivenessPort open("127.0.0.1");
  EXPECT_GE(seconds_to_reform_without_c(etcd, "slow", open.port(), 2), 2);
}


// An HTTP proxy in front of etcd that forwards every request, but for the first transaction it
// applies the request and then never answers (until it is destroyed): the client times out, as
// when an answer is lost in the network, and repeats the request on its next endpoint.
class LoseFirstTxnAnswer {
 public:
  explicit LoseFirstTxnAnswer(const cadre::rdzv::Endpoint& etcd) : etcd_(etcd) {
    server_.Post(R"(/v3/(.*))", [this](const httplib::Request& req, httplib::Response& res) {
      httplib::Client client(etcd_.host, etcd_.port);
      auto answer = client.Post(req.path.c_str(), req.body, "application/json");
      if (!answer) {
        res.status = 502;
        return;
      }
      res.status = answer->status;
      res.set_content(answer->body, "application/json");
      std::unique_lock<std::mutex> lock(mutex_);
      if (req.path == "/v3/kv/txn" && !lost_) {
        lost_ = true;
        stop_cv_.wait(lock, [&] { return stopping_; });  // the answer never arrives in time
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~LoseFirstTxnAnswer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  bool lost() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lost_;
  }

 private:
  cadre::rdzv::Endpoint etcd_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool lost_ = false, stopping_ = false;
};

TEST(EtcdStore, AnAddWhoseAnswerIsLostAndWhichIsRepeatedElsewhereCountsOnce) {
  EtcdCluster etcd;
  LoseFirstTxnAnswer proxy(etcd_endpoints_parse(etcd.endpoint(0))[0]);
  EtcdOptions o = options(proxy.endpoint() + "," + etcd.endpoint(0));
  o.request_timeout_s = 1;
  auto store = etcd_store_open(o, 5);
  EXPECT_EQ(store->add("lost/n", 5), 5);  // applied via the proxy, answer lost, repeated on etcd
  EXPECT_TRUE(proxy.lost());
  auto direct = etcd_store_open(options(etcd.endpoints()), 5);
  EXPECT_EQ(direct->try_get("lost/n"), "5");  // not 10
  EXPECT_EQ(store->add("lost/n", 1), 6);
}


TEST(EtcdStore, HttpsEndpointsWorkWithTheRightCaAndFailClearlyWithoutIt) {
  cadre::test::EtcdClusterOptions o;
  o.tls = true;
  EtcdCluster etcd(o);
  bool tls = false;
  EtcdOptions good = options(etcd.endpoints(), 3);
  good.endpoints = etcd_endpoints_parse(etcd.endpoints(), &tls);
  ASSERT_TRUE(tls);
  good.tls = true;
  good.ca_file = etcd.ca_file();
  auto store = etcd_store_open(good, 2);
  EXPECT_EQ(store->add("tls/n", 2), 2);
  store->set_session_key("tls/alive", "x");
  EXPECT_EQ(store->try_get("tls/alive"), "x");
  EXPECT_EQ(store->compare_set("tls/c", "", "v"), "v");
  EtcdOptions system_cas = good;
  system_cas.ca_file.clear();  // the test CA is not among the system's: verification must fail, at once
  auto start = std::chrono::steady_clock::now();
  try {
    etcd_store_open(system_cas, 2);
    FAIL() << "expected a certificate error";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not verify"), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(start), 2);
  EtcdOptions plain = good;
  plain.tls = false;  // http to an https port
  plain.timeout_s = 1;
  EXPECT_THROW(etcd_store_open(plain, 2), cadre::Error);
}


TEST(EtcdRendezvous, AFullRoundThatNobodyClosedIsClosedAndSkippedByALateAgent) {
  EtcdCluster etcd;
  RendezvousConfig c = one_node("unclosed");
  {
    // The only slot of round 0 was taken by an agent that died before anyone closed the round.
    auto ghost = etcd_store_open(options(etcd.endpoints()), 2);
    Rendezvous layout(etcd_store_open(options(etcd.endpoints()), 2), c);
    ghost->add("cadre/unclosed/g0/r0/joined", 1);
    ghost->set_session_key("cadre/unclosed/g0/r0/alive/0", "ghost");
    ghost->set("cadre/unclosed/g0/r0/node/0", node_info_to_json(node("ghost")));
  }
  Rendezvous a(etcd_store_open(options(etcd.endpoints()), 2), c);
  auto start = std::chrono::steady_clock::now();
  Round r = a.join_next_round(node("a"), kNever);
  EXPECT_EQ(r.number, 1);
  EXPECT_EQ(r.nodes[r.group_rank].hostname, "a");
  EXPECT_LT(seconds_since(start), 3);
}


TEST(EtcdStore, ClientCertificateAuthWorksAndNoCertificateIsRefused) {
  cadre::test::EtcdClusterOptions o;
  o.client_cert_auth = true;
  EtcdCluster etcd(o);
  EtcdOptions with_cert = options(etcd.endpoints(), 3);
  with_cert.tls = true;
  with_cert.ca_file = etcd.ca_file();
  with_cert.cert_file = etcd.client_cert_file();
  with_cert.key_file = etcd.client_key_file();
  auto store = etcd_store_open(with_cert, 2);
  EXPECT_EQ(store->add("cert/n", 1), 1);
  EtcdOptions without = with_cert;
  without.cert_file.clear();
  without.key_file.clear();
  without.timeout_s = 1;
  try {
    etcd_store_open(without, 2);
    FAIL() << "expected the members to refuse a client without a certificate";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find(etcd.endpoint(0).substr(8)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("client certificate"), std::string::npos) << e.what();
  }
}

}  // namespace
