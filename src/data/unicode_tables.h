// Unicode classes for the Hugging Face pre-tokenizer scanners: Letter, Number, Mark, connector
// punctuation and White_Space, as the tokenizers library's regex engine sees them. The range
// table is generated (unicode_tables.cpp, by scripts/gen_unicode_tables.py).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cadre::detail {

enum class UniClass : uint8_t { Other = 0, Letter = 1, DecimalNumber = 2, LetterNumber = 3, OtherNumber = 4, Mark = 5,
                                ConnectorPunct = 6 };

struct UniRange {
  uint32_t first, last;
  uint8_t klass;  // a UniClass value
};
extern const UniRange kUniRanges[];
extern const size_t kUniRangeCount;
extern const char kUnicodeVersion[];

UniClass unicode_class(char32_t cp);

inline bool is_letter(char32_t cp) { return unicode_class(cp) == UniClass::Letter; }
inline bool is_number(char32_t cp) {
  UniClass k = unicode_class(cp);
  return k == UniClass::DecimalNumber || k == UniClass::LetterNumber || k == UniClass::OtherNumber;
}
// Unicode's White_Space property (PropList.txt), what both Oniguruma's and Rust regex's \s match.
bool is_white_space(char32_t cp);
// Rust regex's \w (Alphabetic, Mark, Nd, Pc, Join_Control), which added tokens' single_word
// uses; Alphabetic is approximated by Letter + Nl (Other_Alphabetic symbols such as circled
// letters are left out).
bool is_word_char(char32_t cp);

}  // namespace cadre::detail
