// GPT-2's byte-to-unicode mapping (see byte_level.h): the printable bytes '!'..'~', 0xA1..0xAC
// and 0xAE..0xFF stand for themselves; the other 68 bytes, in order, take U+0100 onwards.
#include "data/byte_level.h"

#include <array>

#include "data/utf8.h"

namespace cadre::detail {
namespace {

struct Tables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 0x144> bytes;  // every mapped character is below U+0144
  Tables() {
    bytes.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      utf8_append(chars[b], cp);
      bytes[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_level_char(uint8_t b) { return tables().chars[b]; }

int byte_level_byte(char32_t cp) { return cp < 0x144 ? tables().bytes[cp] : -1; }

std::string byte_level_encode(const std::string& text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) out += t.chars[b];
  return out;
}

}  // namespace cadre::detail
