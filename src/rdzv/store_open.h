// Opens the rendezvous store for a backend and decides which agent hosts the embedded store:
//   static: the agent with --node-rank 0 hosts it on the endpoint; the others connect.
//   c10d:   --node-rank 0 hosts; otherwise an agent on the endpoint's host tries to bind the port
//           and hosts if it wins, else connects (the first agent there hosts it).
//   standalone (one node, no endpoint): host on a free loopback port.
//   etcd:   nobody hosts; every agent is a client of the etcd cluster (etcd_store.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rdzv/endpoint.h"
#include "rdzv/kv_store.h"

namespace cadre::rdzv {

struct StoreOptions {
  std::string backend = "c10d";  // c10d | static | etcd
  Endpoint endpoint{"127.0.0.1", 29500};  // etcd: the first of `endpoints`
  std::vector<Endpoint> endpoints;        // etcd: every member to try, in order
  std::string user, password;             // etcd authentication (optional)
  bool tls = false;                       // etcd over https
  std::string ca_file, cert_file, key_file;  // etcd TLS: CA bundle, client certificate
  double session_ttl_s = 5;               // etcd: lease TTL of the liveness keys
  bool standalone = false;
  int64_t node_rank = -1;
  double timeout_s = 60;  // connecting, and every store operation
  std::string secret;     // the job secret (store/secret.h): required by the embedded store
};

struct OpenedStore {
  std::unique_ptr<KvStore> store;
  bool is_host = false;
  Endpoint endpoint;  // where it actually is (standalone picks the port)
};

OpenedStore store_open(const StoreOptions& options);

}  // namespace cadre::rdzv
