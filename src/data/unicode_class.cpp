// Look-ups in the generated Unicode range table (unicode_tables.cpp) and the two properties
// that are short fixed lists (White_Space, Join_Control).
#include <algorithm>

#include "data/unicode_tables.h"

namespace cadre::detail {

UniClass unicode_class(char32_t cp) {
  // ASCII is most text; answer it without the binary search.
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return UniClass::Letter;
    if (cp >= '0' && cp <= '9') return UniClass::DecimalNumber;
    if (cp == '_') return UniClass::ConnectorPunct;
    return UniClass::Other;
  }
  const UniRange* end = kUniRanges + kUniRangeCount;
  const UniRange* it = std::upper_bound(kUniRanges, end, static_cast<uint32_t>(cp),
                                        [](uint32_t v, const UniRange& r) { return v < r.first; });
  if (it == kUniRanges) return UniClass::Other;
  --it;
  return cp <= it->last ? static_cast<UniClass>(it->klass) : UniClass::Other;
}

bool is_white_space(char32_t cp) {
  // PropList.txt, White_Space (unchanged since Unicode 6.3, when U+180E left it).
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  UniClass k = unicode_class(cp);
  return k != UniClass::Other && k != UniClass::OtherNumber;
}

}  // namespace cadre::detail
