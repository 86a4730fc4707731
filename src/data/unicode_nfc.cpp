// NFC (see unicode_nfc.h): decompose every character canonically (Hangul syllables by
// formula), sort runs of combining marks by combining class, then recompose each mark with
// the last starter unless a mark of the same or higher class (or a starter) sits between.
#include "data/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "data/utf8.h"

namespace cadre::detail {
namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

int ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  const CccRange* end = kCccRanges + kCccRangeCount;
  const CccRange* it = std::upper_bound(kCccRanges, end, static_cast<uint32_t>(cp),
                                        [](uint32_t v, const CccRange& r) { return v < r.first; });
  if (it == kCccRanges) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it = std::lower_bound(kDecompositions, end, static_cast<uint32_t>(cp),
                                             [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

// The primary composite of a + b, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::make_pair(a, b), [](const Composition& c, const auto& v) {
    return c.first != v.first ? c.first < v.first : c.second < v.second;
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// Canonical ordering: a stable sort by class of each run of non-starters.
void reorder(std::vector<char32_t>& cps) {
  for (size_t i = 1; i < cps.size(); ++i) {
    int c = ccc(cps[i]);
    if (c == 0) continue;
    for (size_t j = i; j > 0 && ccc(cps[j - 1]) > c; --j) std::swap(cps[j - 1], cps[j]);
  }
}

void recompose(std::vector<char32_t>& cps) {
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;
  int last = -1;  // class of the last character kept after the starter; -1: none yet
  for (char32_t cp : cps) {
    int c = ccc(cp);
    bool blocked = last != -1 && (last == 0 || last >= c);
    if (starter != SIZE_MAX && !blocked) {
      if (char32_t composite = compose(out[starter], cp)) {
        out[starter] = composite;
        continue;
      }
    }
    if (c == 0) {
      starter = out.size();
      last = -1;
    } else {
      last = c;
    }
    out.push_back(cp);
  }
  cps.swap(out);
}

}  // namespace

std::string nfc(const std::string& text) {
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;
  utf8_decode(text, cps, offsets);
  // Below U+0300 nothing decomposes into something else NFC keeps, nor composes.
  if (std::all_of(cps.begin(), cps.end(), [](char32_t c) { return c < 0x300; })) return text;
  std::vector<char32_t> d;
  d.reserve(cps.size() + 8);
  for (char32_t cp : cps) decompose(cp, d);
  reorder(d);
  recompose(d);
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : d) utf8_append(out, cp);
  return out;
}

}  // namespace cadre::detail
