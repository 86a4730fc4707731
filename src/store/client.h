// Client of the job store (server.h). Every operation has a deadline (c10d's client had none
// until its first get), every connection proves the job secret and checks that the server
// proves it too (so a program squatting on the port cannot hand out forged peer addresses).
// Thread-safe: each call takes an idle connection or opens one, so a blocking wait in one
// thread never holds up another thread's calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "store/wire.h"

namespace cadre::store {

// Something listens and accepted the connection but sent no greeting in time (the port
// belongs to some other program, or the host is unreachable mid-handshake).
class NoGreeting : public Error {
 public:
  using Error::Error;
};

// The store refused this client's proof, or could not prove the secret itself.
class AuthenticationFailed : public Error {
 public:
  using Error::Error;
};

class StoreClient {
 public:
  // Opens and authenticates the first connection, retrying refused connections until
  // `timeout` (the server may not be up yet); Error naming host:port otherwise. `timeout` is
  // also every operation's deadline.
  // `name` says which store it is in messages ("rendezvous store 10.0.0.1:29400: ...").
  StoreClient(std::string host, uint16_t port, std::string secret, std::chrono::milliseconds timeout,
              std::string name = "job store");
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Sets a key the store deletes when this client goes (its process dies, or its session
  // connection breaks). Sent on a connection of its own, kept open for the client's lifetime.
  void set_session(const std::string& key, const std::string& value);
  std::optional<std::string> try_get(const std::string& key);
  // Waits up to `wait` for the key to exist; Error when it does not.
  std::string get(const std::string& key, std::chrono::milliseconds wait);
  int64_t add(const std::string& key, int64_t delta);
  // Sets key to desired if it holds expected ("" = absent); the value afterwards (nullopt: absent).
  std::optional<std::string> compare_set(const std::string& key, const std::string& expected,
                                         const std::string& desired);
  bool check(const std::vector<std::string>& keys);
  bool erase(const std::string& key);
  int64_t num_keys();
  // Waits up to `wait` for every key to exist; Error naming the missing wait otherwise.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds wait);

  std::string describe() const;  // "host:port"
  const std::string& name() const { return name_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Connection;  // one authenticated socket
  std::unique_ptr<Connection> open(std::chrono::steady_clock::time_point deadline);
  // Sends `request` on an idle (or a new) connection and reads the reply within the timeout
  // plus `extra_wait`; Error naming the store and `what` on any failure (the connection is
  // then dropped), or on a Failed reply.
  Reply exchange(const Request& request, std::chrono::milliseconds extra_wait, const std::string& what);
  // One request and its reply on `c` by `deadline`; Error naming the store and `what`.
  Reply round_trip(Connection& c, const Request& request, std::chrono::steady_clock::time_point deadline,
                   std::chrono::milliseconds waited, const std::string& what);

  std::string host_;
  uint16_t port_;
  std::string name_;
  std::string secret_;
  std::chrono::milliseconds timeout_;
  std::mutex idle_mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::mutex session_mutex_;
  std::unique_ptr<Connection> session_;  // carries set_session only; its closing ends them
};

}  // namespace cadre::store
