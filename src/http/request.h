// One parsed HTTP/1.x request as the server's handlers see it: method, target split into a
// decoded path and the raw query, the header fields in arrival order, and the whole body (its
// chunked framing already removed).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cadre::http {

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // percent-decoded
  std::string query;   // after '?', not decoded
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The first field of that name (case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0 only with `keep-alive`.
  bool keep_alive() const;
};

bool equals_ignore_case(std::string_view a, std::string_view b);
// Whether a comma-separated header value lists `token` (case-insensitive), e.g. "keep-alive, Upgrade".
bool lists_token(std::string_view value, std::string_view token);

}  // namespace cadre::http
