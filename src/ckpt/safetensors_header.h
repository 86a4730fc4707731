// The header of a safetensors file (8-byte little-endian length, then JSON naming each
// tensor's dtype, shape and byte range), parsed and checked without libtorch: every size and
// offset with overflow-checked arithmetic, every dtype code safetensors defines sized, so a
// damaged or hostile file is a SafetensorsError naming it, never an out-of-bounds copy. The one
// parser of both Cadre's own safetensors reader and the Hugging Face folder reader, which reads
// only the header of a file that may be many GB.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace cadre {

// A damaged file is bad input (exit 2 from the CLI), like any other.
class SafetensorsError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // a safetensors code: "F32", "BF16", "F16", "I64", "I8", "F8_E4M3", ...
  std::vector<int64_t> shape;  // every dimension >= 0
  uint64_t begin = 0, end = 0; // byte range within the whole file, end <= its size; matches shape x dtype
};

// Bytes per element of a safetensors dtype code; 0 for a code safetensors does not define.
int64_t safetensors_element_size(const std::string& dtype);

// The header's length from a file's first 8 bytes, checked against the file's size.
uint64_t safetensors_header_length(const char (&prefix)[8], uint64_t file_size, const std::string& path);

// Parses the header's JSON (`text`, the bytes after the length) of a file of `file_size` bytes.
// Entries come in the header's order; `__metadata__` is skipped.
std::vector<SafetensorsEntry> safetensors_parse_header_text(std::string_view text, uint64_t file_size,
                                                            const std::string& path);

// The same from the whole file's bytes.
std::vector<SafetensorsEntry> safetensors_parse_header(const std::string& file, const std::string& path);

}  // namespace cadre
