// Header lookup and the keep-alive rule of RFC 9112 section 9.3 (see request.h).
#include "http/request.h"

#include <cctype>

namespace cadre::http {

bool equals_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool lists_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (equals_ignore_case(trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

std::string Request::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (equals_ignore_case(key, name)) return value;
  return "";
}

bool Request::has_header(std::string_view name) const {
  for (const auto& field : headers)
    if (equals_ignore_case(field.first, name)) return true;
  return false;
}

bool Request::keep_alive() const {
  bool close = false, keep = false;
  for (const auto& [key, value] : headers) {
    if (!equals_ignore_case(key, "Connection")) continue;
    close = close || lists_token(value, "close");
    keep = keep || lists_token(value, "keep-alive");
  }
  if (close) return false;
  return minor_version >= 1 || keep;
}

}  // namespace cadre::http
