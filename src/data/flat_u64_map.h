// FlatU64Map: an open-addressing hash table from 64-bit keys to small values, for the BPE
// model's inner loop (bpe_model.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cadre::detail {

// An open-addressing hash table from 64-bit keys (never ~0) to small values: the merge and
// character look-ups sit in BPE's inner loop, where std::unordered_map's prime modulo and
// node chasing cost more than the merging itself on long words.
template <typename V>
class FlatU64Map {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;  // at most half full: probe runs stay short
    if (cap > slots_.size()) rehash(cap);
  }
  void insert_or_assign(uint64_t key, const V& value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t i = slot_of(key);
    while (slots_[i].key != key && slots_[i].key != kEmpty) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = Slot{key, value};
  }
  const V* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };
  // Fibonacci hashing: the high bits of key * 2^64/phi spread the packed id pairs well.
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void rehash(size_t cap) {  // cap: a power of two
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (shift_ = 64; cap > 1; cap >>= 1) --shift_;
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != kEmpty) insert_or_assign(s.key, s.value);
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace cadre::detail
