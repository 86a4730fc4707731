// The key-value store interface rendezvous is built on: the few atomic operations a round needs.
// Backends: the embedded TCP store (tcp_store.h); an etcd backend can implement the same five calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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
};

}  // namespace cadre::rdzv
