// Generated tokens -> text that is safe to show: incremental SentencePiece decoding (a token
// can end in the middle of a UTF-8 character under byte fallback, and a word's leading space
// depends on the token before it), and stop sequences (text that might be the start of a stop
// sequence is held back until it is clear; a stop sequence ends the text before it).
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace cadre {

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, const std::vector<int>& prompt, std::vector<std::string> stop);

  // Adds a generated token; returns the text that became final (often empty). After a stop
  // sequence appears, stopped() is true and nothing more is returned.
  std::string push(int token);
  // At the end of generation: the text still held back.
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& emitted() const { return emitted_text_; }

 private:
  std::string decode_from(size_t begin, size_t end) const;
  std::string release();

  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  std::vector<int> tokens_;  // a few prompt tokens for context, then the generated ones
  size_t prefix_offset_ = 0, read_offset_ = 0;
  std::string text_;          // decoded generated text
  std::string emitted_text_;  // the part of text_ handed out
  bool stopped_ = false;
};

}  // namespace cadre
