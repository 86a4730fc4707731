// SentencePiece tokenizer: training on a corpus and encoding/decoding text. The library is
// reached through a shim loaded at run time (see spm_shim.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

// Trains a BPE model with byte fallback (as Llama's) on a file of one sentence per line.
// Writes <prefix>.model and <prefix>.vocab.
void tokenizer_train(const std::string& lines_file, const std::string& prefix, int64_t vocab_size, int threads);

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int> encode(const std::string& text) const;
  std::string decode(const std::vector<int>& ids) const;
  // The vocabulary's spelling of one token ("\u2581the" with SentencePiece's space mark, "<0x0A>").
  std::string piece(int id) const;
  int64_t vocab_size() const;
  int bos_id() const;
  int eos_id() const;

 private:
  void* handle_ = nullptr;  // owned by the SentencePiece shim
  std::string path_;
};

}  // namespace cadre
