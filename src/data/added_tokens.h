// Added tokens of a Hugging Face tokenizer.json ("added_tokens"): the text is cut at them
// before pre-tokenization, leftmost-longest as the tokenizers library does, honouring each
// token's lstrip, rstrip and single_word.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace cadre::detail {

struct AddedToken {
  std::string content;
  int id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A span of the input: an added token (id >= 0, the span including any stripped spaces) or
// text still to be tokenized (id == -1).
struct Segment {
  size_t begin, end;
  int id;
};

// Finds one set of added tokens in text (tokenizers keeps two: normalized and not).
class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }
  // Splits text[begin, end) into segments, appending them to out (empty spans are dropped).
  void split(const std::string& text, size_t begin, size_t end, std::vector<Segment>& out) const;

 private:
  // The longest token starting at text[i] (before `end`), or -1: an index into tokens_.
  int longest_at(const std::string& text, size_t i, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::array<bool, 256> first_byte_{};  // bytes some token starts with: most text skips the trie
  // A byte trie over the contents: node -> (byte -> child), and each node's token index.
  std::vector<std::unordered_map<unsigned char, int>> children_{1};
  std::vector<int> terminal_{-1};
};

}  // namespace cadre::detail
