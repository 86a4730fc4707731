// The PROXY protocol (HAProxy's, versions 1 and 2): a layer-4 load balancer (AWS NLB, HAProxy,
// Envoy) writes one header before a connection's first byte naming the client it accepted the
// connection from, where an HTTP balancer would add X-Forwarded-For. Behind it every peer
// address is the balancer's; the header carries the client's. Only read from a trusted proxy
// (`cadre serve --proxy-protocol` with --trusted-proxies): any client could write one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cadre::http {

struct ProxyHeader {
  size_t length = 0;   // the header's bytes, which come before the first request
  // The source address (IPv4 or IPv6 text); "" for a connection the proxy made itself (v2
  // LOCAL, v1 UNKNOWN, an unspecified or UNIX-socket family): a health check, counted as the peer.
  std::string client;
};

enum class ProxyParse { Done, NeedMore, Invalid };

// The header at the start of `bytes`. Done fills `out`; NeedMore while `bytes` could still
// begin one; Invalid with `error` saying what is wrong: no PROXY signature (v1 "PROXY ", v2's
// 12 bytes), a v1 line without CRLF within its 107 bytes, an unknown protocol, version or
// command, an address or port that does not parse, addresses longer than the header says.
ProxyParse proxy_header_parse(std::string_view bytes, ProxyHeader* out, std::string* error);

}  // namespace cadre::http
