// The header of a safetensors file (8-byte little-endian length, then JSON naming each
// tensor's dtype, shape and byte range), parsed and checked without libtorch: every size and
// offset with overflow-checked arithmetic, so a damaged or hostile file is a SafetensorsError
// naming it, never an out-of-bounds copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace cadre {

class SafetensorsError : public Error {
 public:
  using Error::Error;
};

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "F32", "BF16", "F16", "I64", "I32"
  std::vector<int64_t> shape;  // every dimension >= 0
  uint64_t begin = 0, end = 0; // byte range within the whole file, end <= its size
};

// Bytes per element of a safetensors dtype code; 0 when Cadre does not read it.
int64_t safetensors_element_size(const std::string& dtype);

// Parses the header of `file` (the whole file's bytes; `path` names it in errors). Entries
// come in the header's order; `__metadata__` is skipped.
std::vector<SafetensorsEntry> safetensors_parse_header(const std::string& file, const std::string& path);

}  // namespace cadre
