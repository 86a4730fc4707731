// UTF-8 helpers for the Hugging Face tokenizer: repairing invalid input the way Rust's
// String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace") do, and walking code points.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/utf8_append.h"

namespace cadre::detail {

// Each maximal invalid subsequence (Unicode's "maximal subpart" rule) becomes one U+FFFD.
// Valid input comes back unchanged.
std::string utf8_repair(const std::string& bytes);
bool utf8_valid(const std::string& bytes);

// Decodes valid UTF-8 into code points and the byte offset where each starts (plus one final
// offset equal to the size), so that scanners work on code points and slice bytes.
void utf8_decode(const std::string& text, std::vector<char32_t>& cps, std::vector<size_t>& offsets);

// The code point starting at text[i] (text valid UTF-8).
char32_t utf8_decode_at(const std::string& text, size_t i);

// Length of the valid UTF-8 sequence starting at text[i] (text must be valid).
inline size_t utf8_char_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace cadre::detail
