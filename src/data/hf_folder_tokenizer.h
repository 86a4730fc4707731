// A Hugging Face model folder's tokenizer: tokenizer.json (hf_tokenizer.h) with the special
// tokens and chat template of tokenizer_config.json and the end-of-sequence ids of
// generation_config.json and config.json (Llama 3 instruct ends a turn with <|eot_id|>, which
// only generation_config.json names).
#pragma once

#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_config.h"
#include "data/tokenizer.h"

namespace cadre {

class HfFolderTokenizer final : public Tokenizer {
 public:
  // `tokenizer_json`: the tokenizer.json file; the other files are read beside it when present.
  explicit HfFolderTokenizer(const std::string& tokenizer_json);

  std::vector<int> encode(const std::string& text) const override { return hf_.encode(text, false); }
  std::vector<int> encode_prompt(const std::string& text) const override { return hf_.encode(text, true); }
  std::vector<int> encode_rendered(const std::string& text) const override { return hf_.encode(text, false); }
  std::string decode(const std::vector<int>& ids) const override { return hf_.decode(ids, true); }
  std::string token_text(int id) const override { return hf_.token_bytes(id); }

  int64_t vocab_size() const override { return hf_.vocab_size(); }
  int bos_id() const override { return bos_id_; }
  std::vector<int> eos_ids() const override { return eos_ids_; }
  std::string bos_token() const override { return config_.bos_token; }
  std::string eos_token() const override { return config_.eos_token; }
  std::string chat_template() const override { return config_.chat_template; }
  std::string ids_file() const override { return path_; }

 private:
  int special_id(const std::string& token, const char* field) const;

  std::string path_;
  HfTokenizer hf_;
  HfTokenizerConfig config_;
  int bos_id_ = -1;
  std::vector<int> eos_ids_;
};

}  // namespace cadre
