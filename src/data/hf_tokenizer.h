// A Hugging Face tokenizer.json tokenizer: encodes and decodes exactly as the Python
// `tokenizers` library does for BPE tokenizers, byte-level (GPT-2, Llama 3, Qwen 2.5-style
// pre-tokenizers) or SentencePiece-style (Llama 2, Mistral: Prepend/Replace normalizers or
// Metaspace, byte fallback), with added and special tokens and TemplateProcessing. Unsupported
// parts of a file are refused when loading (cadre::ConfigError naming the file and field).
//
// Invalid UTF-8 input (which Python cannot pass to tokenizers) is first repaired as
// bytes.decode("utf-8", "replace") does: each maximal invalid subsequence becomes U+FFFD.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cadre {

namespace detail {
struct HfPipeline;
}

class HfTokenizer {
 public:
  explicit HfTokenizer(const std::string& tokenizer_json_path);
  // From tokenizer.json's text (a fuzz target's input); `name` only names it in errors.
  static HfTokenizer from_json_text(const std::string& text, const std::string& name);
  ~HfTokenizer();
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  // add_special_tokens applies the post-processor (e.g. Llama 3's <|begin_of_text|>), as
  // tokenizers' encode(text, add_special_tokens=...) does. Thread-safe.
  std::vector<int> encode(const std::string& text, bool add_special_tokens) const;
  // Unknown ids are skipped, as tokenizers does; invalid UTF-8 in the result becomes U+FFFD.
  std::string decode(const std::vector<int>& ids, bool skip_special_tokens) const;

  // One more than the largest id of the vocabulary and added tokens (the embedding's rows).
  int64_t vocab_size() const;
  int token_to_id(const std::string& token) const;  // -1 when absent
  std::string id_to_token(int id) const;            // "" when absent
  // The bytes token `id` adds to a decoded text, which may be part of a UTF-8 character (for
  // OpenAI's logprobs "bytes"); "" when absent. Special tokens are their spelling.
  std::string token_bytes(int id) const;
  bool is_special(int id) const;

 private:
  explicit HfTokenizer(detail::HfPipeline&& pipeline);
  void encode_text(const std::string& text, bool at_start, std::vector<int>& ids) const;

  std::unique_ptr<detail::HfPipeline> p_;
  struct Index;
  std::unique_ptr<Index> index_;
};

}  // namespace cadre
