// Resolving a host name to the IPv4 address the store, the rendezvous and the agents connect to.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

namespace cadre {

// The first IPv4 address of `host` with `port`; Error naming the host when it does not resolve.
sockaddr_in resolve_ipv4(const std::string& host, uint16_t port);

}  // namespace cadre
