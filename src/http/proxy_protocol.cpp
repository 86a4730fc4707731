// PROXY protocol headers, versions 1 (one text line) and 2 (binary), as HAProxy's
// specification (proxy-protocol.txt) defines them.
#include "http/proxy_protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cadre::http {
namespace {

constexpr std::string_view kV1Signature = "PROXY ";
constexpr size_t kV1MaxLength = 107;  // "PROXY TCP6 " + two longest IPv6 + two ports + CRLF
constexpr char kV2Signature[12] = {'\r', '\n', '\r', '\n', '\0', '\r', '\n', 'Q', 'U', 'I', 'T', '\n'};
constexpr size_t kV2Fixed = 16;  // signature, version/command, family/transport, length

// Whether `bytes` is a prefix of `signature` or starts with it.
bool begins_like(std::string_view bytes, std::string_view signature) {
  const size_t n = std::min(bytes.size(), signature.size());
  return bytes.substr(0, n) == signature.substr(0, n);
}

ProxyParse invalid(std::string* error, const std::string& why) {
  *error = why;
  return ProxyParse::Invalid;
}

std::vector<std::string_view> split_spaces(std::string_view line) {
  std::vector<std::string_view> words;
  for (size_t at = 0; at <= line.size();) {
    const size_t end = std::min(line.find(' ', at), line.size());
    words.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  return words;
}

// Its text when `word` is an address of `family` (AF_INET or AF_INET6) in canonical form.
bool address_text(int family, std::string_view word, std::string* text) {
  unsigned char bytes[16];
  const std::string copy(word);
  if (copy.size() > 45 || ::inet_pton(family, copy.c_str(), bytes) != 1) return false;
  char out[INET6_ADDRSTRLEN];
  if (!::inet_ntop(family, bytes, out, sizeof out)) return false;
  *text = out;
  return true;
}

bool port_text(std::string_view word) {
  if (word.empty() || word.size() > 5 || (word.size() > 1 && word[0] == '0')) return false;
  uint32_t value = 0;
  for (char c : word) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + uint32_t(c - '0');
  }
  return value <= 65535;
}

ProxyParse parse_v1(std::string_view bytes, ProxyHeader* out, std::string* error) {
  const size_t end = bytes.substr(0, kV1MaxLength).find("\r\n");
  if (end == std::string_view::npos)
    return bytes.size() >= kV1MaxLength ? invalid(error, "a PROXY v1 line without CRLF within 107 bytes")
                                        : ProxyParse::NeedMore;
  const std::vector<std::string_view> words = split_spaces(bytes.substr(kV1Signature.size(), end - kV1Signature.size()));
  out->length = end + 2;
  out->client.clear();
  if (words[0] == "UNKNOWN") return ProxyParse::Done;  // the rest of the line is ignored
  const int family = words[0] == "TCP4" ? AF_INET : words[0] == "TCP6" ? AF_INET6 : 0;
  if (family == 0) return invalid(error, "PROXY v1 protocol '" + std::string(words[0]) + "' (TCP4, TCP6 or UNKNOWN)");
  std::string destination;
  if (words.size() != 5 || !address_text(family, words[1], &out->client) || !address_text(family, words[2], &destination) ||
      !port_text(words[3]) || !port_text(words[4]))
    return invalid(error, "a PROXY v1 line that is not '" + std::string(words[0]) +
                              " <source> <destination> <source port> <destination port>'");
  return ProxyParse::Done;
}

ProxyParse parse_v2(std::string_view bytes, ProxyHeader* out, std::string* error) {
  if (bytes.size() < kV2Fixed) return ProxyParse::NeedMore;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned version = byte(12) >> 4, command = byte(12) & 15, family = byte(13) >> 4;
  const size_t length = size_t(byte(14)) << 8 | byte(15);
  if (version != 2) return invalid(error, "PROXY v2 header of version " + std::to_string(version));
  if (command > 1) return invalid(error, "PROXY v2 command " + std::to_string(command) + " (0 LOCAL or 1 PROXY)");
  if (family > 3) return invalid(error, "PROXY v2 address family " + std::to_string(family));
  if (bytes.size() < kV2Fixed + length) return ProxyParse::NeedMore;
  out->length = kV2Fixed + length;
  out->client.clear();
  if (command == 0 || (family != 1 && family != 2)) return ProxyParse::Done;  // LOCAL, UNSPEC, UNIX
  const size_t address_bytes = family == 1 ? 4 : 16;
  if (length < 2 * address_bytes + 4)
    return invalid(error, "PROXY v2 header of " + std::to_string(length) + " bytes after its 16, too few for its addresses");
  char text[INET6_ADDRSTRLEN];
  if (!::inet_ntop(family == 1 ? AF_INET : AF_INET6, bytes.data() + kV2Fixed, text, sizeof text))
    return invalid(error, "PROXY v2 source address");
  out->client = text;
  return ProxyParse::Done;
}

}  // namespace

ProxyParse proxy_header_parse(std::string_view bytes, ProxyHeader* out, std::string* error) {
  if (begins_like(bytes, std::string_view(kV2Signature, sizeof kV2Signature)))
    return bytes.size() < sizeof kV2Signature ? ProxyParse::NeedMore : parse_v2(bytes, out, error);
  if (begins_like(bytes, kV1Signature))
    return bytes.size() < kV1Signature.size() ? ProxyParse::NeedMore : parse_v1(bytes, out, error);
  return invalid(error, "the connection did not begin with a PROXY protocol header (v1 or v2)");
}

}  // namespace cadre::http
