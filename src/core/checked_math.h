// Overflow-checked integer arithmetic for sizes and offsets read from files and the network:
// a length field of a damaged or hostile file must become an error naming the field, never a
// wrapped-around size that passes a bounds check.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace cadre {

template <typename T>
std::optional<T> checked_add(T a, T b) {
  static_assert(std::is_integral_v<T>, "integers only");
  T out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <typename T>
std::optional<T> checked_mul(T a, T b) {
  static_assert(std::is_integral_v<T>, "integers only");
  T out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// Number of elements of a tensor shape: nullopt when a dimension is negative or the product
// does not fit int64.
inline std::optional<int64_t> checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    auto next = checked_mul(n, d);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

}  // namespace cadre
