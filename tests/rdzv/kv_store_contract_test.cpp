// The KvStore contract, run against every backend (the embedded TCP store and a real etcd):
// set/try_get/add/compare_set must mean the same everywhere, since rendezvous relies on nothing
// else. Also checks the optional calls' defaults and etcd's versions of them.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "rdzv/etcd_store.h"
#include "rdzv/tcp_store.h"
#include "support/etcd_cluster.h"

using namespace cadre::rdzv;

namespace {

const std::string kSecret = "kv-store-contract-test-secret";

// Opens clients of one store: the first call hosts (TCP) or starts etcd; later calls connect.
class Backend {
 public:
  explicit Backend(const std::string& name) : name_(name) {
    if (name_ == "etcd") etcd_ = std::make_unique<cadre::test::EtcdCluster>(1);
  }
  std::unique_ptr<KvStore> client() {
    if (name_ == "etcd") {
      EtcdOptions o;
      o.endpoints = etcd_endpoints_parse(etcd_->endpoints());
      o.timeout_s = 10;
      return etcd_store_open(o, 2);
    }
    if (!host_) {
      host_ = tcp_store_host("127.0.0.1", 0, std::chrono::seconds(10), kSecret);
      port_ = tcp_store_port(*host_);
    }
    return tcp_store_connect("127.0.0.1", port_, std::chrono::seconds(10), kSecret);
  }

 private:
  std::string name_;
  std::unique_ptr<cadre::test::EtcdCluster> etcd_;
  std::unique_ptr<KvStore> host_;
  uint16_t port_ = 0;
};

class KvStoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  Backend backend{GetParam()};
};

TEST_P(KvStoreContract, SetGetAddCompareSetMeanTheSame) {
  auto store = backend.client();
  EXPECT_EQ(store->try_get("k/absent"), std::nullopt);
  store->set("k/a", "one");
  EXPECT_EQ(store->try_get("k/a"), "one");
  store->set("k/a", "two");
  EXPECT_EQ(store->try_get("k/a"), "two");
  store->set("k/empty", "");
  EXPECT_EQ(store->try_get("k/empty"), "");  // an empty value is not an absent key
  const std::string bytes("\0\x01\xff{\"x\": 1}\n", 12);
  store->set("k/bytes", bytes);
  EXPECT_EQ(store->try_get("k/bytes"), bytes);

  EXPECT_EQ(store->add("k/n", 0), 0);  // absent counts as 0, and the key then exists
  EXPECT_EQ(store->try_get("k/n"), "0");
  EXPECT_EQ(store->add("k/n", 5), 5);
  EXPECT_EQ(store->add("k/n", -2), 3);
  EXPECT_EQ(store->add("k/n", 0), 3);
  EXPECT_EQ(store->try_get("k/n"), "3");
  EXPECT_EQ(store->add("k/m", 7), 7);

  // compare_set: "" = must be absent; the answer is the value stored afterwards.
  EXPECT_EQ(store->compare_set("k/cas", "", "first"), "first");
  EXPECT_EQ(store->compare_set("k/cas", "", "second"), "first");
  EXPECT_EQ(store->compare_set("k/cas", "wrong", "third"), "first");
  EXPECT_EQ(store->compare_set("k/cas", "first", "fourth"), "fourth");
  EXPECT_EQ(store->try_get("k/cas"), "fourth");
  EXPECT_NE(store->describe(), "");
}

TEST_P(KvStoreContract, ConcurrentAddsAndCompareSetsFromSeveralClientsAreExact) {
  constexpr int kClients = 3, kAdds = 20;
  std::vector<std::unique_ptr<KvStore>> clients;
  for (int c = 0; c < kClients; ++c) clients.push_back(backend.client());
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<int> wins(kClients);
  for (int c = 0; c < kClients; ++c)
    threads.emplace_back([&, c] {
      for (int i = 0; i < kAdds; ++i) seen[c].push_back(clients[c]->add("c/counter", 1));
      // Exactly one client wins the race to create the key.
      wins[c] = clients[c]->compare_set("c/winner", "", std::to_string(c)) == std::to_string(c);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(clients[0]->add("c/counter", 0), kClients * kAdds);
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < kClients * kAdds; ++i) EXPECT_EQ(all[i], i + 1);  // every value handed out once
  EXPECT_EQ(wins[0] + wins[1] + wins[2], 1);
}

TEST_P(KvStoreContract, WaitForChangeReturnsByTheTimeoutWhenNothingChanges) {
  auto store = backend.client();
  store->try_get("w/x");
  auto start = std::chrono::steady_clock::now();
  store->wait_for_change("w/", 0.3, 0.3);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 2.0);
}

INSTANTIATE_TEST_SUITE_P(Backends, KvStoreContract, ::testing::Values("tcp", "etcd"),
                         [](const auto& info) { return info.param; });

}  // namespace
