// The proxies whose word on the real client is taken: behind a load balancer every client
// arrives from the balancer's few addresses, so per-client limits must count the address the
// proxy reports in X-Forwarded-For, and only when the peer is a proxy the operator named (any
// client can send the header). The real client is the rightmost address in the chain that is
// not itself a trusted proxy (nginx's real_ip_recursive, Envoy's trusted hops): entries a
// client wrote to the left of what the trusted proxies appended are never believed.
#pragma once

#include <string>
#include <vector>

namespace cadre::http {

class TrustedProxies {
 public:
  TrustedProxies() = default;
  // Comma-separated IPv4 or IPv6 addresses or CIDR ranges ("10.0.0.0/8,127.0.0.1,::1");
  // ConfigError naming `what` and the entry for anything else.
  static TrustedProxies parse(const std::string& text, const std::string& what);

  bool empty() const { return ranges_.empty(); }
  bool contains(const std::string& address) const;
  // The client a request from `peer` stands for, given its X-Forwarded-For values (all of the
  // request's headers of that name, in order): the peer itself when it is not trusted, when the
  // header is absent or when the entry next to the trusted part is not an address.
  std::string client_of(const std::string& peer, const std::vector<std::string>& forwarded_for) const;

 private:
  struct Range {
    int family = 0;               // AF_INET or AF_INET6
    unsigned char bytes[16] = {};
    int bits = 0;
  };
  std::vector<Range> ranges_;
};

}  // namespace cadre::http
