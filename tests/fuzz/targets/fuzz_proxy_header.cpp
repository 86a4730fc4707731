// PROXY protocol headers as `cadre serve --proxy-protocol` reads them from a trusted proxy's
// connection: any bytes. A header found is found the same in pieces (every shorter prefix
// needs more), lies within the bytes, and names a client that is an address or none; bytes
// found invalid never become a header when more arrive.
#include <arpa/inet.h>

#include "fuzz_target.h"
#include "http/proxy_protocol.h"

using cadre::http::proxy_header_parse;
using cadre::http::ProxyHeader;
using cadre::http::ProxyParse;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = cadre::fuzz::text(data, size);
  ProxyHeader header;
  std::string error;
  const ProxyParse whole = proxy_header_parse(input, &header, &error);
  if (whole == ProxyParse::Done) {
    if (header.length == 0 || header.length > input.size()) cadre::fuzz::violated("a header outside the bytes");
    unsigned char address[16];
    if (!header.client.empty() && inet_pton(AF_INET, header.client.c_str(), address) != 1 &&
        inet_pton(AF_INET6, header.client.c_str(), address) != 1)
      cadre::fuzz::violated("a client that is not an address");
    for (size_t k = 0; k < header.length; ++k) {
      ProxyHeader part;
      if (proxy_header_parse(std::string_view(input).substr(0, k), &part, &error) != ProxyParse::NeedMore)
        cadre::fuzz::violated("a prefix of a header was not waiting for more");
    }
  }
  if (whole == ProxyParse::Invalid) {
    ProxyHeader more;
    if (proxy_header_parse(input + std::string(200, 'x'), &more, &error) != ProxyParse::Invalid)
      cadre::fuzz::violated("invalid bytes became something else when more arrived");
  }
  return 0;
}
