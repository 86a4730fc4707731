// A tensor shape as text for messages: "[4096, 1024]".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace cadre
