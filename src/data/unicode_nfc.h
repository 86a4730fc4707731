// Unicode Normalization Form C, for tokenizer.json's NFC normalizer (Qwen 2.5 has one): the
// canonical decomposition, canonical ordering and canonical composition of UAX #15, over
// generated tables (unicode_nfc_tables.cpp, by scripts/gen_unicode_tables.py --nfc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cadre::detail {

struct CccRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second == 0: a singleton decomposition
};
struct Composition {
  uint32_t first, second, composite;
};
extern const CccRange kCccRanges[];
extern const size_t kCccRangeCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

// text (valid UTF-8) in NFC.
std::string nfc(const std::string& text);

}  // namespace cadre::detail
