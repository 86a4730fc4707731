// UTF-8 repair and decoding for the Hugging Face tokenizer (see utf8.h).
#include "data/utf8.h"

namespace cadre::detail {
namespace {

// Length of the well-formed sequence at s[i], or 0 with *bad set to how many bytes form the
// maximal invalid subpart (at least 1) that one U+FFFD replaces.
size_t sequence_at(const unsigned char* s, size_t n, size_t i, size_t* bad) {
  unsigned char b = s[i];
  if (b < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the range the second byte must fall in
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
    if (i + k >= n || s[i + k] < lo_k || s[i + k] > hi_k) {
      *bad = k;
      return 0;
    }
  }
  return need + 1;
}

}  // namespace

bool utf8_valid(const std::string& bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size(), bad = 0;
  for (size_t i = 0; i < n;) {
    size_t len = sequence_at(s, n, i, &bad);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string utf8_repair(const std::string& bytes) {
  if (utf8_valid(bytes)) return bytes;
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  std::string out;
  out.reserve(n + 16);
  for (size_t i = 0; i < n;) {
    size_t bad = 0, len = sequence_at(s, n, i, &bad);
    if (len) {
      out.append(bytes, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

char32_t utf8_decode_at(const std::string& text, size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  unsigned char b = s[i];
  size_t len = utf8_char_len(b);
  char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len && i + k < text.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
  return cp;
}

void utf8_decode(const std::string& text, std::vector<char32_t>& cps, std::vector<size_t>& offsets) {
  cps.clear();
  offsets.clear();
  for (size_t i = 0; i < text.size(); i += utf8_char_len(static_cast<unsigned char>(text[i]))) {
    cps.push_back(utf8_decode_at(text, i));
    offsets.push_back(i);
  }
  offsets.push_back(text.size());
}

}  // namespace cadre::detail
