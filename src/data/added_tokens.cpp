// Cutting text at added tokens (see added_tokens.h), following tokenizers'
// AddedVocabulary::find_matches: leftmost-longest matches, single_word checked with Rust
// regex's \w on the neighbouring characters, lstrip/rstrip widening the span over White_Space.
#include "data/added_tokens.h"

#include <algorithm>

#include "data/unicode_tables.h"
#include "data/utf8.h"

namespace cadre::detail {
namespace {

// The code point ending at text[end) (text valid UTF-8, end > begin).
char32_t last_char(const std::string& text, size_t begin, size_t end, size_t* start) {
  size_t i = end - 1;
  while (i > begin && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  *start = i;
  return utf8_decode_at(text, i);
}

char32_t first_char(const std::string& text, size_t begin, size_t* len) {
  *len = utf8_char_len(static_cast<unsigned char>(text[begin]));
  return utf8_decode_at(text, begin);
}

// Start of the White_Space run that ends at `end` (no earlier than `floor`).
size_t spaces_before(const std::string& text, size_t floor, size_t end) {
  size_t start = 0;
  while (end > floor && is_white_space(last_char(text, floor, end, &start))) end = start;
  return end;
}

// End of the White_Space run that starts at `begin` (no later than `end`).
size_t spaces_after(const std::string& text, size_t begin, size_t end) {
  size_t len = 0;
  while (begin < end && is_white_space(first_char(text, begin, &len))) begin += len;
  return begin;
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;
  first_byte_[static_cast<unsigned char>(token.content[0])] = true;
  int node = 0;
  for (unsigned char b : token.content) {
    auto it = children_[static_cast<size_t>(node)].find(b);
    if (it == children_[static_cast<size_t>(node)].end()) {
      int child = static_cast<int>(children_.size());
      children_[static_cast<size_t>(node)].emplace(b, child);
      children_.emplace_back();
      terminal_.push_back(-1);
      node = child;
    } else {
      node = it->second;
    }
  }
  terminal_[static_cast<size_t>(node)] = static_cast<int>(tokens_.size());
  tokens_.push_back(token);
}

int AddedTokenMatcher::longest_at(const std::string& text, size_t i, size_t end) const {
  if (!first_byte_[static_cast<unsigned char>(text[i])]) return -1;
  int node = 0, best = -1;
  for (size_t k = i; k < end; ++k) {
    const auto& kids = children_[static_cast<size_t>(node)];
    auto it = kids.find(static_cast<unsigned char>(text[k]));
    if (it == kids.end()) break;
    node = it->second;
    if (terminal_[static_cast<size_t>(node)] >= 0) best = terminal_[static_cast<size_t>(node)];
  }
  return best;
}

void AddedTokenMatcher::split(const std::string& text, size_t begin, size_t end, std::vector<Segment>& out) const {
  size_t done = begin;  // tokenizers' start_offset: everything before it is emitted
  size_t i = begin;
  while (i < end) {
    int found = longest_at(text, i, end);
    if (found < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<size_t>(found)];
    size_t start = i, stop = i + tok.content.size();
    i = stop;  // matches never overlap, even when one is then discarded
    if (tok.single_word) {
      size_t unused = 0;
      bool word_before = start > begin && is_word_char(last_char(text, begin, start, &unused));
      bool word_after = stop < end && is_word_char(first_char(text, stop, &unused));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) start = std::max(spaces_before(text, begin, start), done);
    if (tok.rstrip) stop = spaces_after(text, stop, end);
    if (done < start) out.push_back({done, start, -1});
    out.push_back({start, stop, tok.id});
    done = stop;
  }
  if (done < end) out.push_back({done, end, -1});
}

}  // namespace cadre::detail

