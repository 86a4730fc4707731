// Network helpers for rendezvous: host:port parsing, "is this host me?", free ports, and the
// local address other nodes can reach this one at.
#pragma once

#include <cstdint>
#include <string>

namespace cadre::rdzv {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "host:port" or "host" (then default_port). Throws ConfigError naming the text on bad input.
Endpoint endpoint_parse(const std::string& text, uint16_t default_port);

// True when host resolves to an address of this machine (loopback or a local interface).
bool host_is_local(const std::string& host);

// True when a TCP listener could be bound on host:port right now.
bool port_is_free(const std::string& host, uint16_t port);

// A port that was free on host a moment ago (bind to port 0, read it, close).
uint16_t free_port(const std::string& host);

// The local IP address this machine uses to reach host (a UDP connect; no packet is sent).
std::string local_address_towards(const std::string& host);

}  // namespace cadre::rdzv
