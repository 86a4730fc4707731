// Trusted proxy ranges and the real client behind them.
#include "http/trusted_proxies.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstring>
#include <sstream>

#include "core/error.h"

namespace cadre::http {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// An address's family and bytes; 0 when `text` is not an IPv4 or IPv6 address.
int address_bytes(const std::string& text, unsigned char (&out)[16]) {
  if (::inet_pton(AF_INET, text.c_str(), out) == 1) return AF_INET;
  if (::inet_pton(AF_INET6, text.c_str(), out) == 1) return AF_INET6;
  return 0;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(trim(item));
  return out;
}

}  // namespace

TrustedProxies TrustedProxies::parse(const std::string& text, const std::string& what) {
  TrustedProxies out;
  for (const std::string& entry : split_commas(text)) {
    const size_t slash = entry.find('/');
    Range r;
    r.family = address_bytes(entry.substr(0, slash), r.bytes);
    CADRE_CONFIG_CHECK(r.family != 0, what, ": '", entry, "' is not an IPv4 or IPv6 address or CIDR range");
    const int width = r.family == AF_INET ? 32 : 128;
    r.bits = width;
    if (slash != std::string::npos) {
      const std::string bits = entry.substr(slash + 1);
      CADRE_CONFIG_CHECK(!bits.empty() && bits.size() <= 3 && bits.find_first_not_of("0123456789") == std::string::npos &&
                             std::stoi(bits) <= width,
                         what, ": '", entry, "' has a prefix length outside 0..", width);
      r.bits = std::stoi(bits);
    }
    out.ranges_.push_back(r);
  }
  return out;
}

bool TrustedProxies::contains(const std::string& address) const {
  unsigned char a[16] = {};
  const int family = address_bytes(address, a);
  if (family == 0) return false;
  for (const Range& r : ranges_) {
    if (r.family != family) continue;
    const int whole = r.bits / 8, rest = r.bits % 8;
    if (std::memcmp(a, r.bytes, static_cast<size_t>(whole)) != 0) continue;
    const unsigned mask = rest ? (0xFFu << (8 - rest)) & 0xFFu : 0;
    if (rest == 0 || (a[whole] & mask) == (r.bytes[whole] & mask)) return true;
  }
  return false;
}

std::string TrustedProxies::client_of(const std::string& peer, const std::vector<std::string>& forwarded_for) const {
  if (!contains(peer)) return peer;
  std::vector<std::string> chain;
  for (const std::string& value : forwarded_for)
    for (const std::string& entry : split_commas(value)) chain.push_back(entry);
  std::string client = peer;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    unsigned char bytes[16];
    if (address_bytes(*it, bytes) == 0) break;  // an entry that is not an address ends the trust
    client = *it;
    if (!contains(*it)) break;
  }
  return client;
}

}  // namespace cadre::http
