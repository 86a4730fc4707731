// The embedded rendezvous store: c10d's TCPStore hosted inside one agent, reached by the others.
// The store lives only as long as the hosting agent (see docs/DESIGN.md, "Launcher").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "rdzv/kv_store.h"

namespace cadre::rdzv {

// Hosts a store on host:port (port 0 picks a free port; see KvStore::describe for the result).
// Throws cadre::Error naming the port when it cannot be bound (e.g. already in use).
std::unique_ptr<KvStore> tcp_store_host(const std::string& host, uint16_t port,
                                        std::chrono::milliseconds timeout);

// Connects to a store hosted elsewhere, retrying until `timeout`, then checks that the peer
// answers like a store; throws cadre::Error naming the endpoint otherwise.
std::unique_ptr<KvStore> tcp_store_connect(const std::string& host, uint16_t port,
                                           std::chrono::milliseconds timeout);

// The port a hosted store listens on (0 for a client).
uint16_t tcp_store_port(const KvStore& store);

}  // namespace cadre::rdzv
