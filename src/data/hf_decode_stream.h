// Streamed decoding for an HfTokenizer, as the tokenizers library's DecodeStream does it: each
// new id yields the text it completes, never half of a multi-byte character (the text is held
// back while the decoded tail ends in U+FFFD) and with the spacing the decoders give in context
// (it decodes a short window of ids, not each id alone).
#pragma once

#include <string>
#include <vector>

namespace cadre {

class HfTokenizer;

class HfDecodeStream {
 public:
  HfDecodeStream(const HfTokenizer& tokenizer, bool skip_special_tokens)
      : tok_(tokenizer), skip_special_(skip_special_tokens) {}

  // Adds one id; returns true and sets *text to the newly completed text, or returns false
  // while the text is incomplete. Throws cadre::Error when the decoders rewrite text already
  // returned (tokenizers' InvalidPrefix), which the supported decoders do not do.
  bool step(int id, std::string* text);

 private:
  const HfTokenizer& tok_;
  bool skip_special_;
  std::vector<int> ids_;     // the window: ids from the start of the last returned text on
  std::string prefix_;       // the window's ids before prefix_index_, decoded
  size_t prefix_index_ = 0;
};

}  // namespace cadre
