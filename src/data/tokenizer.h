// A model's tokenizer, whichever kind its files are: a SentencePiece .model
// (sentencepiece_tokenizer.h) or a Hugging Face tokenizer.json with its tokenizer_config.json
// and generation_config.json (hf_folder_tokenizer.h). Data preparation, generation, serving
// and chat templates see tokenizers only through this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cadre {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Plain text to ids, nothing added. A tokenizer.json's added tokens spelled in the text
  // become their ids (as the tokenizers library does); a SentencePiece model's stay text.
  virtual std::vector<int> encode(const std::string& text) const = 0;
  // What transformers' tokenizer(text) gives: `encode` with what the tokenizer puts around a
  // text (BOS for Llama 2; a tokenizer.json's post-processor, <|begin_of_text|> for Llama 3).
  virtual std::vector<int> encode_prompt(const std::string& text) const = 0;
  // Text a chat template rendered: the special tokens spelled in it are their ids and nothing
  // is added, as apply_chat_template encodes (add_special_tokens=False).
  virtual std::vector<int> encode_rendered(const std::string& text) const = 0;
  // Special tokens leave no text (skip_special_tokens=True).
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  // The bytes token `id` adds to a decoded sequence (" the", "\n", or one byte of a multi-byte
  // character): logprobs name tokens by it.
  virtual std::string token_text(int id) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1: none
  // Generation ends at any of them; the first also ends each document of prepared data.
  virtual std::vector<int> eos_ids() const = 0;
  int eos_id() const;  // eos_ids()'s first, -1 when none
  // The spellings chat templates receive as bos_token and eos_token ("" when none).
  virtual std::string bos_token() const = 0;
  virtual std::string eos_token() const = 0;
  // The chat template the tokenizer's files carry (tokenizer_config.json's); "" when none.
  virtual std::string chat_template() const = 0;
  // The file that decides the ids (tokenizer.model or tokenizer.json): data records its
  // identity (tokenizer_identity.h), and data prepare copies the files beside it.
  virtual std::string ids_file() const = 0;
};

// Loads a SentencePiece .model file, a tokenizer.json, or a folder holding either (with the
// folder's tokenizer_config.json and generation_config.json beside a tokenizer.json).
// ConfigError naming the path and what is wrong.
std::unique_ptr<Tokenizer> tokenizer_load(const std::string& path);

// Where a folder's tokenizer is: its tokenizer.model, else its tokenizer.json; "" when neither.
std::string tokenizer_file_in(const std::string& dir);

}  // namespace cadre
