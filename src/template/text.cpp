// Python str semantics over UTF-8 (see text.h).
#include "template/text.h"

#include <clocale>
#include <cwctype>
#include <locale.h>

namespace cadre::tmpl::text {
namespace {

// Case mapping through the C library's C.UTF-8 tables (simple one-to-one mappings, as most
// of Python's are); ASCII only when the locale is missing.
locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

char32_t to_upper(char32_t c) {
  if (c < 128) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc)) : c;
}

char32_t to_lower(char32_t c) {
  if (c < 128) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc)) : c;
}

bool is_alpha(char32_t c) {
  if (c < 128) return (c | 32) >= 'a' && (c | 32) <= 'z';
  locale_t loc = utf8_locale();
  return loc && iswalpha_l(static_cast<wint_t>(c), loc);
}

bool in_set(char32_t c, const std::u32string& set) { return set.find(c) != std::u32string::npos; }

}  // namespace

std::u32string decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
    char32_t c = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
    bool ok = n >= 0 && i + n < s.size();
    for (int k = 1; ok && k <= n; ++k) {
      const unsigned char cb = static_cast<unsigned char>(s[i + k]);
      if ((cb & 0xC0) != 0x80) ok = false;
      c = (c << 6) | (cb & 0x3F);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += c;
    i += n + 1;
  }
  return out;
}

std::string encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t length(const std::string& s) {
  size_t n = 0;
  for (unsigned char b : s) n += (b & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(const std::string& s, Side side, const std::string* chars) {
  const std::u32string u = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto removable = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t a = 0, b = u.size();
  if (side != Side::Right)
    while (a < b && removable(u[a])) ++a;
  if (side != Side::Left)
    while (b > a && removable(u[b - 1])) --b;
  return encode(u.substr(a, b - a));
}

std::string upper(const std::string& s) {
  std::u32string u = decode(s);
  for (auto& c : u) c = to_upper(c);
  return encode(u);
}

std::string lower(const std::string& s) {
  std::u32string u = decode(s);
  for (auto& c : u) c = to_lower(c);
  return encode(u);
}

std::string capitalize(const std::string& s) {
  std::u32string u = decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_upper(u[i]) : to_lower(u[i]);
  return encode(u);
}

std::string title(const std::string& s) {
  std::u32string u = decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = is_alpha(c);
  }
  return encode(u);
}

std::vector<std::string> split(const std::string& s, const std::string* sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string::npos) break;
      out.push_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  const std::u32string u = decode(s);
  size_t i = 0;
  while (i < u.size()) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) {
      std::u32string rest = u.substr(i);
      while (!rest.empty() && is_space(rest.back())) rest.pop_back();
      out.push_back(encode(rest));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    out.push_back(encode(u.substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(const std::string& s, const std::string* sep, long maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<long>(out.size()) < maxsplit && end >= sep->size()) {
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string::npos) break;
      out.insert(out.begin(), s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.insert(out.begin(), s.substr(0, end));
    return out;
  }
  std::u32string u = decode(s);
  size_t j = u.size();
  while (j > 0) {
    while (j > 0 && is_space(u[j - 1])) --j;
    if (j == 0) break;
    if (static_cast<long>(out.size()) == maxsplit) {
      size_t a = 0;
      while (a < j && is_space(u[a])) ++a;
      out.insert(out.begin(), encode(u.substr(a, j - a)));
      break;
    }
    size_t i = j;
    while (i > 0 && !is_space(u[i - 1])) --i;
    out.insert(out.begin(), encode(u.substr(i, j - i)));
    j = i;
  }
  return out;
}

std::vector<std::string> splitlines(const std::string& s) {
  const std::u32string u = decode(s);
  std::vector<std::string> out;
  std::u32string line;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                          c == 0x2028 || c == 0x2029;
    if (!boundary) {
      line += c;
      continue;
    }
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    out.push_back(encode(line));
    line.clear();
  }
  if (!line.empty()) out.push_back(encode(line));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, long count) {
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::u32string u = decode(s);
    std::string out;
    long done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < u.size()) utf8_append(out, u[i]);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  long done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

}  // namespace cadre::tmpl::text
