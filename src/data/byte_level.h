// GPT-2's byte-to-unicode mapping, which byte-level BPE (the ByteLevel pre-tokenizer and
// decoder) uses so that every byte is a printable character in the vocabulary.
#pragma once

#include <cstdint>
#include <string>

namespace cadre::detail {

// The UTF-8 spelling of the character that stands for byte b.
const std::string& byte_level_char(uint8_t b);
// The byte a character stands for, or -1 when the character is not one of the 256.
int byte_level_byte(char32_t cp);
// Every byte of text replaced by its character.
std::string byte_level_encode(const std::string& text);

}  // namespace cadre::detail
