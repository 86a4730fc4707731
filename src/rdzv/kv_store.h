// The key-value store interface rendezvous is built on: the few atomic operations a round needs.
// Backends: the embedded TCP store (tcp_store.h) implements the five required calls; etcd
// (etcd_store.h) also offers the optional capabilities below, whose defaults fit a store without them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace cadre::rdzv {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value, or nullopt when the key does not exist. Never blocks waiting for the key.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Atomically adds delta to an integer key (absent = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically sets key to desired if its value is expected ("" = key absent); returns the value
  // stored afterwards, so the caller learns whether it won.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Where the store lives, for error messages ("host:port").
  virtual std::string describe() const = 0;

  // --- Optional capabilities ---
  // Sessions: keys bound to this client's life. A store with sessions deletes them when the
  // client stops renewing (etcd: a lease kept alive by a background thread), so peers learn of a
  // death by the key vanishing; without sessions rendezvous uses heartbeat counters instead.
  virtual bool has_sessions() const { return false; }
  virtual void set_session_key(const std::string& key, const std::string& value) { set(key, value); }
  // Session keys vanish at once when their client dies (its connection closes), though not when
  // it is only cut off: a death seen fast, beside the heartbeats (or the leases) that catch the rest.
  virtual bool session_keys_vanish_on_death() const { return has_sessions(); }
  // Blocks until a key under prefix may have changed since this client's latest read, or
  // timeout_s passes. May return early: callers re-check their condition. The default (no change
  // notification) sleeps poll_interval_s, at most timeout_s.
  virtual void wait_for_change(const std::string& prefix, double timeout_s, double poll_interval_s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(timeout_s, poll_interval_s)));
  }
  // Deletes every key under prefix. The default does nothing: a store that dies with its job
  // (the embedded one) needs no cleanup; a persistent one (etcd) must not grow forever.
  virtual void erase_prefix(const std::string& prefix) {}
};

}  // namespace cadre::rdzv
