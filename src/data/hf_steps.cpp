// Running the normalizer, pre-tokenizer and decoder steps of a tokenizer.json (hf_pipeline.h),
// each as the tokenizers library's component of the same name does.
#include <algorithm>

#include "data/byte_level.h"
#include "data/hf_pipeline.h"
#include "data/unicode_nfc.h"
#include "data/utf8.h"

namespace cadre::detail {
namespace {

using Pieces = std::vector<std::string>;

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t i = 0;
  for (size_t hit; (hit = text.find(from, i)) != std::string::npos; i = hit + from.size()) out.append(text, i, hit - i) += to;
  out.append(text, i, std::string::npos);
  text.swap(out);
}

void split_pieces(SplitPattern pattern, const std::string& text, Pieces& out) {
  thread_local std::vector<std::pair<size_t, size_t>> ranges;
  ranges.clear();
  split_isolated(pattern, text, ranges);
  for (const auto& [b, e] : ranges) out.emplace_back(text, b, e - b);
}

void byte_level(const PreTokenizerStep& step, std::string& piece, Pieces& next) {
  if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
  size_t first = next.size();
  if (step.use_regex) split_pieces(SplitPattern::Gpt2, piece, next);
  else next.push_back(std::move(piece));
  for (size_t i = first; i < next.size(); ++i) next[i] = byte_level_encode(next[i]);
}

// Spaces become the replacement; with split, each replacement starts a new piece
// (tokenizers' MergedWithNext).
void metaspace(const PreTokenizerStep& step, std::string& piece, bool at_start, Pieces& next) {
  replace_all(piece, " ", step.replacement);
  bool starts = piece.compare(0, step.replacement.size(), step.replacement) == 0;
  if (!starts && (step.prepend == PrependScheme::Always || (step.prepend == PrependScheme::First && at_start)))
    piece.insert(0, step.replacement);
  if (!step.split) {
    next.push_back(std::move(piece));
    return;
  }
  size_t begin = 0;
  for (size_t hit = piece.find(step.replacement, 1); hit != std::string::npos; hit = piece.find(step.replacement, hit + 1)) {
    next.emplace_back(piece, begin, hit - begin);
    begin = hit;
  }
  next.emplace_back(piece, begin, std::string::npos);
}

// ByteLevel decoder: each token whose characters all stand for bytes becomes those bytes;
// any other token (an added token such as "<|eot id|>") is kept as written. One string out.
std::string byte_level_decode(const Pieces& tokens) {
  std::string out;
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;
  for (const std::string& t : tokens) {
    utf8_decode(t, cps, offsets);
    std::string bytes;
    bool all = true;
    for (char32_t c : cps) {
      int b = byte_level_byte(c);
      if (b < 0) {
        all = false;
        break;
      }
      bytes += static_cast<char>(b);
    }
    out += all ? bytes : t;
  }
  return utf8_repair(out);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xAB>" -> 0xAB, or -1. Rust's u8::from_str_radix also takes a leading '+'.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  if (t[3] == '+') return hex_digit(t[4]);
  int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// ByteFallback decoder: runs of byte tokens become their UTF-8 text, or one U+FFFD per byte
// when the run is not valid UTF-8.
Pieces byte_fallback(const Pieces& tokens) {
  Pieces out;
  std::string run;
  size_t run_len = 0;
  auto flush = [&] {
    if (run_len == 0) return;
    if (utf8_valid(run)) out.push_back(run);
    else for (size_t i = 0; i < run_len; ++i) out.emplace_back("\xEF\xBF\xBD");
    run.clear();
    run_len = 0;
  };
  for (const std::string& t : tokens) {
    int b = byte_token(t);
    if (b >= 0) {
      run += static_cast<char>(b);
      ++run_len;
      continue;
    }
    flush();
    out.push_back(t);
  }
  flush();
  return out;
}

// Strip decoder: up to `start` leading and `stop` trailing copies of one character removed.
void strip(const DecoderStep& step, std::string& t) {
  size_t b = 0, e = t.size();
  for (size_t k = 0; k < step.start && t.compare(b, step.from.size(), step.from) == 0 && b < e; ++k) b += step.from.size();
  for (size_t k = 0; k < step.stop && e >= b + step.from.size() && t.compare(e - step.from.size(), step.from.size(), step.from) == 0; ++k)
    e -= step.from.size();
  t = t.substr(b, e - b);
}

// Metaspace decoder: the replacement becomes a space, except in the first token, where
// (unless the prepend scheme is "never") every replacement character is dropped.
void metaspace_decode(const DecoderStep& step, Pieces& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], step.from, i == 0 && step.strip_first ? "" : " ");
}

}  // namespace

void normalize(const std::vector<NormalizerStep>& steps, std::string& text) {
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::Prepend:
        if (!text.empty()) text.insert(0, step.to);
        break;
      case NormalizerStep::Kind::Replace: replace_all(text, step.from, step.to); break;
      case NormalizerStep::Kind::Nfc: text = nfc(text); break;
    }
  }
}

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, const std::string& text, bool at_start, Pieces& pieces) {
  pieces.assign(1, text);
  for (const PreTokenizerStep& step : steps) {
    Pieces next;
    next.reserve(pieces.size() * 2);
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& piece = pieces[i];
      switch (step.kind) {
        case PreTokenizerStep::Kind::Split: split_pieces(step.pattern, piece, next); break;
        case PreTokenizerStep::Kind::ByteLevel: byte_level(step, piece, next); break;
        case PreTokenizerStep::Kind::Metaspace: metaspace(step, piece, at_start && i == 0, next); break;
      }
    }
    // tokenizers drops empty pieces after every step.
    next.erase(std::remove_if(next.begin(), next.end(), [](const std::string& s) { return s.empty(); }), next.end());
    pieces.swap(next);
  }
}

std::string token_bytes(const std::vector<DecoderStep>& steps, std::string token) {
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::ByteLevel: {
        utf8_decode(token, cps, offsets);
        std::string bytes;
        for (char32_t c : cps) {
          const int b = byte_level_byte(c);
          if (b < 0) break;
          bytes += static_cast<char>(b);
        }
        if (bytes.size() == cps.size()) token = bytes;
        break;
      }
      case DecoderStep::Kind::Replace: replace_all(token, step.from, step.to); break;
      case DecoderStep::Kind::ByteFallback:
        if (const int b = byte_token(token); b >= 0) token.assign(1, static_cast<char>(b));
        break;
      case DecoderStep::Kind::Metaspace: replace_all(token, step.from, " "); break;
      case DecoderStep::Kind::Fuse:
      case DecoderStep::Kind::Strip: break;  // about the whole text, not one token
    }
  }
  return token;
}

std::string decode_tokens(const std::vector<DecoderStep>& steps, Pieces tokens) {
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::ByteLevel: tokens.assign(1, byte_level_decode(tokens)); break;
      case DecoderStep::Kind::Replace: for (std::string& t : tokens) replace_all(t, step.from, step.to); break;
      case DecoderStep::Kind::ByteFallback: tokens = byte_fallback(tokens); break;
      case DecoderStep::Kind::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, all);
        break;
      }
      case DecoderStep::Kind::Strip: for (std::string& t : tokens) strip(step, t); break;
      case DecoderStep::Kind::Metaspace: metaspace_decode(step, tokens); break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace cadre::detail
