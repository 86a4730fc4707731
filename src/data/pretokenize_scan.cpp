// Scanners equivalent to the GPT-2, Llama 3 and Qwen 2.5 pre-tokenizer regexes (see
// pretokenize_scan.h). Each match function returns where the regex's match starting at i ends;
// the alternatives are tried in the pattern's order, as a backtracking engine does.
#include "data/pretokenize_scan.h"

#include "data/unicode_tables.h"
#include "data/utf8.h"

namespace cadre::detail {
namespace {

// The patterns exactly as tokenizer.json files spell them. GPT-2's is also what the ByteLevel
// pre-tokenizer uses when use_regex is true.
const char kGpt2[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Text {
  const char32_t* s;
  size_t n;
  bool ws(size_t i) const { return is_white_space(s[i]); }
  bool letter(size_t i) const { return is_letter(s[i]); }
  bool number(size_t i) const { return is_number(s[i]); }
  // [^\s\p{L}\p{N}]
  bool other(size_t i) const { return !ws(i) && !letter(i) && !number(i); }
  bool newline(size_t i) const { return s[i] == '\r' || s[i] == '\n'; }
  template <typename Pred>
  size_t run(size_t i, Pred pred) const {
    while (i < n && (this->*pred)(i)) ++i;
    return i;
  }
};

// Oniguruma's case folding under (?i:...) maps 'S' and U+017F (long s) to 's'; no other
// character folds to the ASCII letters of the contractions.
char32_t fold(char32_t c, bool ignore_case) {
  if (!ignore_case) return c;
  if (c >= 'A' && c <= 'Z') return c + 32;
  return c == 0x17F ? U's' : c;
}

// 's|'t|'re|'ve|'m|'ll|'d: the end of the match, or 0.
size_t contraction(const Text& t, size_t i, bool ignore_case) {
  if (t.s[i] != '\'' || i + 1 >= t.n) return 0;
  char32_t a = fold(t.s[i + 1], ignore_case);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 >= t.n) return 0;
  char32_t b = fold(t.s[i + 2], ignore_case);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace character: the run, less its last character when a
// non-space follows and the run has more than one.
size_t whitespace_tail(const Text& t, size_t i) {
  size_t k = t.run(i, &Text::ws);
  return (k < t.n && k > i + 1) ? k - 1 : k;
}

size_t match_gpt2(const Text& t, size_t i) {
  if (size_t e = contraction(t, i, false)) return e;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': without the space the character at i would
  // have to be a letter, number or other, which a space is not, so one j serves all three.
  size_t j = t.s[i] == ' ' && i + 1 < t.n ? i + 1 : i;
  if (t.letter(j)) return t.run(j, &Text::letter);
  if (t.number(j)) return t.run(j, &Text::number);
  if (t.other(j)) return t.run(j, &Text::other);
  return whitespace_tail(t, i);
}

size_t match_llama3(const Text& t, size_t i, size_t max_digits) {
  if (size_t e = contraction(t, i, true)) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (t.letter(i)) return t.run(i, &Text::letter);
  if (!t.newline(i) && !t.number(i) && i + 1 < t.n && t.letter(i + 1)) return t.run(i + 1, &Text::letter);
  // \p{N}{1,3} (Llama 3) or \p{N} (Qwen 2.5)
  if (t.number(i)) {
    size_t e = i;
    while (e < t.n && e - i < max_digits && t.number(e)) ++e;
    return e;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t j = t.s[i] == ' ' && i + 1 < t.n ? i + 1 : i;
  if (t.other(j)) return t.run(t.run(j, &Text::other), &Text::newline);
  // \s*[\r\n]+: the whitespace run up to and including its last line break.
  size_t k = t.run(i, &Text::ws);
  for (size_t p = k; p > i; --p)
    if (t.newline(p - 1)) return p;
  return whitespace_tail(t, i);
}

size_t match_at(SplitPattern pattern, const Text& t, size_t i) {
  switch (pattern) {
    case SplitPattern::Gpt2:
      return match_gpt2(t, i);
    case SplitPattern::Llama3:
      return match_llama3(t, i, 3);
    case SplitPattern::Qwen2:
      return match_llama3(t, i, 1);
  }
  return i + 1;
}

}  // namespace

bool split_pattern_from_text(const std::string& text, SplitPattern* out) {
  if (text == kGpt2) *out = SplitPattern::Gpt2;
  else if (text == kLlama3) *out = SplitPattern::Llama3;
  else if (text == kQwen2) *out = SplitPattern::Qwen2;
  else return false;
  return true;
}

void split_isolated(SplitPattern pattern, const std::string& text, std::vector<std::pair<size_t, size_t>>& pieces) {
  // Every character is a letter, number, space or other, and each pattern has an alternative
  // for each that matches at least one character, so matches tile the text with no gaps.
  thread_local std::vector<char32_t> cps;
  thread_local std::vector<size_t> offsets;
  utf8_decode(text, cps, offsets);
  Text t{cps.data(), cps.size()};
  for (size_t i = 0; i < t.n;) {
    size_t e = match_at(pattern, t, i);
    if (e <= i) e = i + 1;  // defensive: never loop on an empty match
    pieces.emplace_back(offsets[i], offsets[e]);
    i = e;
  }
}

}  // namespace cadre::detail
