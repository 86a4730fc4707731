// value_fingerprint: the same sum however the elements are split and ordered; float32 and
// bfloat16 copies of the same values agree; one element's value or place changes it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/value_fingerprint.h"

namespace {

std::vector<float> bf16_exact_values(size_t n) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<float> out(n);
  for (auto& v : out) {
    uint32_t bits;
    float x = normal(gen);
    std::memcpy(&bits, &x, sizeof bits);
    bits &= 0xffff0000u;  // exactly representable in bfloat16
    std::memcpy(&v, &bits, sizeof v);
  }
  return out;
}

TEST(ValueFingerprint, AnySplitAndOrderGivesTheSameSum) {
  const std::vector<float> v = bf16_exact_values(1000);
  const uint64_t key = cadre::value_fingerprint_key("layers.0.attention.wq.weight");
  const uint64_t whole = cadre::value_fingerprint(key, 0, v.data(), 1000);
  // Three pieces, added in reverse order.
  const uint64_t split = cadre::value_fingerprint(key, 700, v.data() + 700, 300) +
                         cadre::value_fingerprint(key, 1, v.data() + 1, 699) +
                         cadre::value_fingerprint(key, 0, v.data(), 1);
  EXPECT_EQ(whole, split);
}

TEST(ValueFingerprint, BFloat16CopiesAgreeWithFloat32AndChangesShow) {
  const std::vector<float> v = bf16_exact_values(64);
  std::vector<uint16_t> bf16(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], sizeof bits);
    bf16[i] = static_cast<uint16_t>(bits >> 16);
  }
  const uint64_t key = cadre::value_fingerprint_key("w");
  const uint64_t base = cadre::value_fingerprint(key, 0, v.data(), 64);
  EXPECT_EQ(base, cadre::value_fingerprint_bf16(key, 0, bf16.data(), 64));
  // A float32 value rounds to its nearest bfloat16 first: below half a bfloat16 step, no change.
  std::vector<float> nudged = v;
  nudged[5] = std::nextafter(nudged[5], 1.f);
  EXPECT_EQ(base, cadre::value_fingerprint(key, 0, nudged.data(), 64));
  std::vector<float> changed = v;
  changed[5] *= 2;
  EXPECT_NE(base, cadre::value_fingerprint(key, 0, changed.data(), 64));
  std::vector<float> swapped = v;
  std::swap(swapped[3], swapped[4]);
  ASSERT_NE(v[3], v[4]);
  EXPECT_NE(base, cadre::value_fingerprint(key, 0, swapped.data(), 64));
  EXPECT_NE(base, cadre::value_fingerprint(cadre::value_fingerprint_key("w2"), 0, v.data(), 64));
  EXPECT_EQ(cadre::value_fingerprint_text(0x0123456789abcdefull), "0x0123456789abcdef");
}

}  // namespace
