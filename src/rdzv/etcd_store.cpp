// KvStore over etcd (see etcd_store.h).
//
// add() is a compare-and-swap loop on the key's mod_revision. The client repeats a request on
// another endpoint when an answer is lost, so a transaction may be applied twice... except that
// a repeated CAS fails its compare. To tell "my lost attempt won" from "someone else changed it",
// each successful add also writes a marker "cadre/.ops/<client>" = "<op seq> <result>" in the same
// transaction; a failed compare reads it back and returns the recorded result.
#include "rdzv/etcd_store.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace cadre::rdzv {
namespace {

using json = nlohmann::json;

json compare_absent(const std::string& key) {
  return {{"key", base64_encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
}

json put_op(const std::string& key, const std::string& value, int64_t lease = 0) {
  json put = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) put["lease"] = std::to_string(lease);
  return {{"request_put", put}};
}

json range_op(const std::string& key) { return {{"request_range", {{"key", base64_encode(key)}}}}; }

class EtcdStore : public KvStore {
 public:
  EtcdStore(const EtcdOptions& options, double ttl_s)
      : client_(options), ttl_s_(std::max<int64_t>(2, static_cast<int64_t>(std::ceil(ttl_s)))) {
    EtcdOptions keeper = options;
    keeper.timeout_s = std::max(1.0, ttl_s_ / 3.0);  // a stuck keep-alive must not outlive the lease
    keeper.request_timeout_s = keeper.timeout_s;
    keeper_client_ = std::make_unique<EtcdClient>(keeper);
    // A read first: etcd 3.4 grants leases even to unauthenticated clients, so this is where a
    // cluster with auth enabled says that credentials are missing or lack permissions.
    client_.get("cadre/");
    lease_ = client_.lease_grant(ttl_s_);
    std::random_device rd;
    ops_key_ = str("cadre/.ops/", ::getpid(), "-", std::hex, (uint64_t(rd()) << 32) | rd());
    keeper_ = std::thread([this] { keep_alive_loop(); });
  }

  ~EtcdStore() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    keeper_.join();
    try {
      // Session keys go at once, so peers need not wait for the TTL. Through the keep-alive
      // client: its short retry budget keeps an exit quick when etcd is unreachable.
      keeper_client_->lease_revoke(lease());
    } catch (const std::exception& e) {
      log::warn(str(client_.describe(), ": revoking the session lease on exit failed (its keys expire within ",
                    ttl_s_, " s): ", e.what()));
    }
  }

  void set(const std::string& key, const std::string& value) override { client_.put(key, value); }

  std::optional<std::string> try_get(const std::string& key) override {
    int64_t revision = 0;
    auto kv = client_.get(key, &revision);
    note_read(revision);
    if (!kv) return std::nullopt;
    return kv->value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t revision = 0;
    std::optional<EtcdKv> current = client_.get(key, &revision);
    note_read(revision);
    if (delta == 0 && current) return to_int(key, current->value);
    const std::string seq = std::to_string(++op_seq_);
    for (;;) {
      int64_t next = (current ? to_int(key, current->value) : 0) + delta;
      json compare = current ? json{{"key", base64_encode(key)}, {"target", "MOD"}, {"result", "EQUAL"},
                                    {"mod_revision", std::to_string(current->mod_revision)}}
                             : compare_absent(key);
      auto txn = [&] {  // rebuilt per attempt: the lease may have been renewed meanwhile
        return json{{"compare", json::array({compare})},
                    {"success", json::array({put_op(key, std::to_string(next)),
                                             put_op(ops_key_, seq + " " + std::to_string(next), lease())})},
                    {"failure", json::array({range_op(key), range_op(ops_key_)})}};
      };
      json answer = with_lease([&] { return client_.call("kv/txn", txn(), str("add(", key, ", ", delta, ")")); });
      if (etcd_txn_succeeded(answer)) return next;
      if (auto marker = etcd_txn_range(answer, 1)) {
        auto space = marker->value.find(' ');
        if (marker->value.substr(0, space) == seq) return to_int(key, marker->value.substr(space + 1));
      }
      current = etcd_txn_range(answer, 0);  // someone else changed it: try again on the new value
    }
  }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    json compare = expected.empty() ? compare_absent(key)
                                    : json{{"key", base64_encode(key)}, {"target", "VALUE"}, {"result", "EQUAL"},
                                           {"value", base64_encode(expected)}};
    json txn = {{"compare", json::array({compare})},
                {"success", json::array({put_op(key, desired)})},
                {"failure", json::array({range_op(key)})}};
    json answer = client_.call("kv/txn", txn, str("compare_set(", key, ")"));
    if (etcd_txn_succeeded(answer)) return desired;
    note_read(etcd_header_revision(answer));
    auto kv = etcd_txn_range(answer, 0);
    return kv ? kv->value : "";
  }

  std::string describe() const override { return client_.describe(); }

  bool has_sessions() const override { return true; }

  void set_session_key(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      session_keys_[key] = value;
    }
    with_lease([&] {
      client_.put(key, value, lease());
      return json();
    });
  }

  void wait_for_change(const std::string& prefix, double timeout_s, double) override {
    int64_t from = first_read_revision_.exchange(0);
    client_.watch_prefix(prefix, from > 0 ? from + 1 : 0, timeout_s);
  }

  void erase_prefix(const std::string& prefix) override { client_.erase_prefix(prefix); }

  int64_t lease() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lease_;
  }

 private:
  static int64_t to_int(const std::string& key, const std::string& value) {
    size_t used = 0;
    int64_t v = 0;
    try { v = std::stoll(value, &used); } catch (const std::exception&) { used = 0; }
    if (used != value.size() || value.empty())
      throw Error(str("etcd: add(", key, "): the stored value '", value, "' is not an integer"));
    return v;
  }

  // Runs fn, which uses the session lease; if etcd no longer knows the lease (it expired while
  // etcd was unreachable and the keep-alive thread has not renewed it yet), renews it and runs
  // fn once more.
  json with_lease(const std::function<json()>& fn) {
    int64_t used = lease();
    try {
      return fn();
    } catch (const Error& e) {
      if (std::string(e.what()).find("lease not found") == std::string::npos) throw;
      renew_lease(used, str("etcd did not know lease ", used));
      return fn();
    }
  }

  // A later watch must start at the first read since the previous wait: every change after it
  // may concern something the caller read.
  void note_read(int64_t revision) {
    int64_t expected = 0;
    first_read_revision_.compare_exchange_strong(expected, revision);
  }

  void keep_alive_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait_for(lock, std::chrono::duration<double>(ttl_s_ / 3.0), [&] { return stopping_; });
      if (stopping_) return;
      int64_t id = lease_;
      lock.unlock();
      try {
        if (keeper_client_->lease_keep_alive(id) <= 0)
          renew_lease(id, str("it expired: no keep-alive got through for ", ttl_s_, " s"));
      } catch (const std::exception& e) {
        log::warn(str(client_.describe(), ": keeping the session lease alive failed (retrying in ", ttl_s_ / 3.0,
                      " s): ", e.what()));
      }
      lock.lock();
    }
  }

  // The lease is gone: peers have seen this agent's session keys vanish. Take a new lease and
  // write the keys again; rendezvous sorts out the rest (the round was probably ended).
  // `stale` is the lease found gone; if another thread renewed it already, nothing to do.
  void renew_lease(int64_t stale, const std::string& why) {
    std::lock_guard<std::mutex> renewing(renew_mutex_);
    if (lease() != stale) return;
    int64_t id = keeper_client_->lease_grant(ttl_s_);
    std::map<std::string, std::string> keys;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      lease_ = id;
      keys = session_keys_;
    }
    log::warn(str(client_.describe(), ": the session lease was lost (", why, "); took a new one"));
    for (const auto& [key, value] : keys) keeper_client_->put(key, value, id);
  }

  EtcdClient client_;
  std::unique_ptr<EtcdClient> keeper_client_;
  const int64_t ttl_s_;
  std::string ops_key_;
  std::atomic<uint64_t> op_seq_{0};
  std::atomic<int64_t> first_read_revision_{0};
  mutable std::mutex mutex_;
  std::mutex renew_mutex_;  // one lease renewal at a time
  std::condition_variable wake_;
  bool stopping_ = false;
  int64_t lease_ = 0;
  std::map<std::string, std::string> session_keys_;
  std::thread keeper_;
};

}  // namespace

std::unique_ptr<KvStore> etcd_store_open(const EtcdOptions& options, double session_ttl_s) {
  try {
    return std::make_unique<EtcdStore>(options, session_ttl_s);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw Error(str("cannot open the rendezvous store in etcd: ", e.what()));
  }
}

}  // namespace cadre::rdzv
