// PROXY protocol headers (http/proxy_protocol.h): v1 lines and v2 binary headers as HAProxy's
// specification writes them, every prefix waiting for more, and what is refused, by name.
#include "http/proxy_protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace cadre::http {
namespace {

const std::string kV2Signature("\r\n\r\n\0\r\nQUIT\n", 12);

// A v2 header: command (0x20 LOCAL, 0x21 PROXY), family/transport, then `addresses` (and TLVs).
std::string v2(unsigned char command, unsigned char family, const std::string& addresses) {
  std::string h = kV2Signature;
  h += char(command);
  h += char(family);
  h += char(addresses.size() >> 8);
  h += char(addresses.size() & 255);
  return h + addresses;
}

ProxyParse parse(const std::string& bytes, ProxyHeader* out = nullptr, std::string* error = nullptr) {
  ProxyHeader h;
  std::string e;
  return proxy_header_parse(bytes, out ? out : &h, error ? error : &e);
}

TEST(ProxyProtocol, HeadersOfBothVersionsNameTheClientAndEveryPrefixWaits) {
  const std::string tcp4_v2 = v2(0x21, 0x11, std::string("\xc6\x33\x64\x07\x0a\x00\x00\x01\x9c\x40\x1f\x40", 12));
  std::string tcp6_addresses(36, '\0');
  tcp6_addresses[0] = '\x20', tcp6_addresses[1] = '\x01', tcp6_addresses[2] = '\x0d', tcp6_addresses[3] = '\xb8';
  tcp6_addresses[15] = '\x07';
  const std::string tlv("\x04\x00\x01\x2a", 4);  // a TLV after the addresses: skipped
  const struct {
    std::string header, client;
  } cases[] = {
      {"PROXY TCP4 198.51.100.7 10.0.0.1 40000 8000\r\n", "198.51.100.7"},
      {"PROXY TCP6 2001:db8:0:0::7 ::1 40000 8000\r\n", "2001:db8::7"},
      {"PROXY UNKNOWN\r\n", ""},
      {"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n", ""},
      {tcp4_v2, "198.51.100.7"},
      {v2(0x21, 0x21, tcp6_addresses + tlv), "2001:db8::7"},
      {v2(0x20, 0x00, ""), ""},         // LOCAL: the balancer's own health check
      {v2(0x21, 0x31, std::string(216, 'u')), ""},  // UNIX sockets: no address to count
  };
  for (const auto& c : cases) {
    ProxyHeader h;
    std::string error;
    ASSERT_EQ(parse(c.header + "GET / HTTP/1.1\r\n", &h, &error), ProxyParse::Done) << c.header << ": " << error;
    EXPECT_EQ(h.length, c.header.size()) << c.header;
    EXPECT_EQ(h.client, c.client) << c.header;
    for (size_t k = 0; k < c.header.size(); ++k)
      EXPECT_EQ(parse(c.header.substr(0, k)), ProxyParse::NeedMore) << c.header << " cut at " << k;
  }
}

TEST(ProxyProtocol, AnythingElseIsRefusedSayingWhat) {
  const struct {
    std::string bytes, error;
  } cases[] = {
      {"GET / HTTP/1.1\r\n\r\n", "did not begin with a PROXY protocol header"},
      {"PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n", "protocol 'TCP5'"},
      {"PROXY TCP4 1.2.3.256 1.2.3.4 1 2\r\n", "'TCP4 <source> <destination>"},
      {"PROXY TCP4 2001:db8::7 1.2.3.4 1 2\r\n", "'TCP4 <source>"},
      {"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n", "'TCP4 <source>"},
      {"PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n", "'TCP4 <source>"},
      {"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n", "'TCP4 <source>"},
      {"PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n", "'TCP4 <source>"},
      {"PROXY TCP4 1.2.3.4" + std::string(100, ' ') + "\r\n", "without CRLF within 107 bytes"},
      {v2(0x11, 0x11, std::string(12, '\0')), "version 1"},
      {v2(0x22, 0x11, std::string(12, '\0')), "command 2"},
      {v2(0x21, 0x41, std::string(12, '\0')), "address family 4"},
      {v2(0x21, 0x11, std::string(11, '\0')), "11 bytes after its 16, too few"},
      {v2(0x21, 0x21, std::string(35, '\0')), "35 bytes after its 16, too few"},
  };
  for (const auto& c : cases) {
    std::string error;
    EXPECT_EQ(parse(c.bytes, nullptr, &error), ProxyParse::Invalid) << c.bytes;
    EXPECT_NE(error.find(c.error), std::string::npos) << c.bytes << ": " << error;
  }
}

}  // namespace
}  // namespace cadre::http
