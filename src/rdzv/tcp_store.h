// The embedded rendezvous store: Cadre's job store (src/store) hosted inside one agent, reached
// by the others over TCP with the job secret. The store lives only as long as the hosting
// agent (see docs/DESIGN.md, "Launcher").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "rdzv/kv_store.h"

namespace cadre::rdzv {

// Hosts a store for peers that reach it at host:port (port 0 picks a free port; see
// KvStore::describe for the result), listening on the address store::listen_address_for(host)
// names, not on every interface. Throws cadre::Error naming the port when it cannot be bound.
std::unique_ptr<KvStore> tcp_store_host(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                                        const std::string& secret);

// Connects to a store hosted elsewhere, retrying until `timeout`, and authenticates both ways
// with the job secret; throws cadre::Error naming the endpoint otherwise.
std::unique_ptr<KvStore> tcp_store_connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                                           const std::string& secret);

// The port a hosted store listens on (0 for a client).
uint16_t tcp_store_port(const KvStore& store);

}  // namespace cadre::rdzv
