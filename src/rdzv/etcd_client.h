// A small client for etcd's v3 API through its JSON gateway (HTTP/1.1 + JSON over cpp-httplib).
// It hides the gateway's encoding (base64 keys and values, int64 as JSON strings, omitted zero
// values), fails over between endpoints, authenticates with user/password, speaks https when
// asked (CA file, optional client certificate), and offers the lease and watch calls the
// rendezvous store needs. The KvStore adapter on top is etcd_store.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rdzv/endpoint.h"
#include "rdzv/etcd_answer.h"

namespace cadre::rdzv {

struct EtcdOptions {
  std::vector<Endpoint> endpoints;
  bool tls = false;             // https to every endpoint
  std::string ca_file;          // TLS: CA bundle that signed the servers ("" = system CAs)
  std::string cert_file, key_file;  // TLS: client certificate (optional, both or neither)
  std::string user, password;   // both empty: no authentication
  double timeout_s = 60;        // one operation keeps trying the endpoints this long
  double request_timeout_s = 5; // one HTTP request to one endpoint
};

// "a:p,b:p" with default port 2379, each optionally prefixed http:// or https:// (one scheme
// for all; *tls says which). Throws ConfigError naming the bad item.
std::vector<Endpoint> etcd_endpoints_parse(const std::string& text, bool* tls = nullptr);

// The smallest key after every key starting with prefix (etcd's range_end for a prefix).
std::string etcd_prefix_end(const std::string& prefix);

class EtcdClient {
 public:
  explicit EtcdClient(EtcdOptions options);

  // POSTs `body` to /v3/<path> and returns the parsed answer. Connection failures, timeouts and
  // "no leader"-like answers move on to the next endpoint, round after round, until timeout_s;
  // then throws Error naming `what`, every endpoint tried and the last error. An answer that is
  // an etcd error (bad lease, permission denied, ...) throws at once with etcd's message.
  // Callers must only send requests that are safe to repeat: a request whose answer was lost
  // may have been applied (put and txn compare-and-swap are; see EtcdStore::add).
  nlohmann::json call(const std::string& path, const nlohmann::json& body, const std::string& what);

  // Decoded helpers over call().
  std::optional<EtcdKv> get(const std::string& key, int64_t* revision = nullptr);
  void put(const std::string& key, const std::string& value, int64_t lease = 0);
  void erase_prefix(const std::string& prefix);
  int64_t lease_grant(int64_t ttl_s);
  // Refreshes a lease; returns its remaining TTL, 0 when it has expired.
  int64_t lease_keep_alive(int64_t id);
  void lease_revoke(int64_t id);

  // Blocks until a change under prefix at a revision >= start_revision is seen, or timeout_s
  // passes (then false). A compacted start revision or a broken stream counts as a change
  // (the caller re-reads anyway).
  bool watch_prefix(const std::string& prefix, int64_t start_revision, double timeout_s);

  std::string describe() const;  // "etcd a:p,b:p"

 private:
  struct Attempt;
  // One request to one endpoint: status and body, or a transport error in `error`.
  Attempt post_once(size_t endpoint, const std::string& path, const std::string& body, double timeout_s);
  void authenticate(size_t endpoint);
  std::string token();

  EtcdOptions options_;
  std::atomic<size_t> preferred_{0};  // the endpoint that answered last
  std::mutex token_mutex_;
  std::string token_;
};

}  // namespace cadre::rdzv
