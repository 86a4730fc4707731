// SentencePiece tokenizer: training on a corpus and encoding/decoding text. The library is
// reached through a shim loaded at run time (see spm_shim.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace cadre {

// Trains a BPE model with byte fallback (as Llama's) on a file of one sentence per line.
// Writes <prefix>.model and <prefix>.vocab.
void tokenizer_train(const std::string& lines_file, const std::string& prefix, int64_t vocab_size, int threads);

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::vector<int> encode(const std::string& text) const override;
  std::vector<int> encode_prompt(const std::string& text) const override;
  // The model's BOS and EOS pieces ("<s>", "</s>") spelled in the text are their ids.
  std::vector<int> encode_rendered(const std::string& text) const override;
  std::string decode(const std::vector<int>& ids) const override;
  std::string token_text(int id) const override;
  // The vocabulary's spelling of one token ("\u2581the" with SentencePiece's space mark, "<0x0A>").
  std::string piece(int id) const;

  int64_t vocab_size() const override;
  int bos_id() const override;
  std::vector<int> eos_ids() const override;
  std::string bos_token() const override;
  std::string eos_token() const override;
  std::string chat_template() const override { return ""; }
  std::string ids_file() const override { return path_; }

 private:
  void* handle_ = nullptr;  // owned by the SentencePiece shim
  std::string path_;
};

}  // namespace cadre
