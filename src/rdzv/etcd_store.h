// The rendezvous KvStore over etcd (v3 JSON gateway, see etcd_client.h): set/get as put/range,
// add and compare_set as transactions, a session lease kept alive by a background thread for
// liveness keys, and watches for waiting. Key layout and rules: docs/DESIGN.md, "etcd rendezvous".
#pragma once

#include <memory>

#include "rdzv/etcd_client.h"
#include "rdzv/kv_store.h"

namespace cadre::rdzv {

// Connects (trying every endpoint), authenticates if asked, and grants the session lease of
// session_ttl_s seconds (at least etcd's minimum of 2). Throws Error naming every endpoint tried.
std::unique_ptr<KvStore> etcd_store_open(const EtcdOptions& options, double session_ttl_s);

}  // namespace cadre::rdzv
