// Incremental detokenization with held-back stop-sequence prefixes.
#include "generate/text_stream.h"

#include <algorithm>

namespace cadre {
namespace {

// Tokenizers render bytes that do not (yet) form a character as U+FFFD (SentencePiece, and
// tokenizer.json's ByteLevel and ByteFallback decoders).
bool ends_incomplete(const std::string& s) { return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0; }

// Prompt tokens kept as context: enough for the leading space of the first generated word.
constexpr size_t kContextTokens = 6;

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, const std::vector<int>& prompt, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  const size_t keep = std::min(prompt.size(), kContextTokens);
  tokens_.assign(prompt.end() - static_cast<std::ptrdiff_t>(keep), prompt.end());
  prefix_offset_ = 0;
  read_offset_ = tokens_.size();
}

std::string TextStream::decode_from(size_t begin, size_t end) const {
  return tokenizer_.decode(std::vector<int>(tokens_.begin() + static_cast<std::ptrdiff_t>(begin),
                                            tokens_.begin() + static_cast<std::ptrdiff_t>(end)));
}

std::string TextStream::push(int token) {
  if (stopped_) return "";
  tokens_.push_back(token);
  const std::string before = decode_from(prefix_offset_, read_offset_);
  const std::string after = decode_from(prefix_offset_, tokens_.size());
  if (after.size() > before.size() && !ends_incomplete(after)) {
    text_ += after.substr(before.size());
    prefix_offset_ = read_offset_;
    read_offset_ = tokens_.size();
  }
  return release();
}

std::string TextStream::release() {
  const size_t done = emitted_text_.size();
  size_t longest = 0;
  for (const auto& s : stop_) longest = std::max(longest, s.size());
  // A stop sequence can only end in the text not yet handed out.
  const size_t from = done >= longest ? done - longest + 1 : 0;
  size_t first = std::string::npos;
  for (const auto& s : stop_) first = std::min(first, text_.find(s, from));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = first > done ? text_.substr(done, first - done) : "";
    emitted_text_ += out;
    return out;
  }
  // Hold back the longest tail that could still grow into a stop sequence.
  size_t hold = 0;
  for (const auto& s : stop_)
    for (size_t n = std::min(s.size() - 1, text_.size() - done); n > hold; --n)
      if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = text_.substr(done, text_.size() - done - hold);
  emitted_text_ += out;
  return out;
}

std::string TextStream::flush() {
  if (stopped_) return "";
  const std::string before = decode_from(prefix_offset_, read_offset_);
  const std::string after = decode_from(prefix_offset_, tokens_.size());
  if (after.size() > before.size()) text_ += after.substr(before.size());
  prefix_offset_ = read_offset_ = tokens_.size();
  std::string out = text_.substr(emitted_text_.size());
  emitted_text_ += out;
  return out;
}

}  // namespace cadre
