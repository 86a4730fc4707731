// The parts of a Hugging Face tokenizer.json that Cadre runs, as read by
// hf_tokenizer_load.cpp and run by hf_tokenizer.cpp and hf_steps.cpp: normalizer and
// pre-tokenizer steps, the BPE model, added tokens, post-processor wrappings and decoder steps.
// Anything else is refused when loading.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/added_tokens.h"
#include "data/bpe_model.h"
#include "data/pretokenize_scan.h"

namespace cadre::detail {

// Normalizers: Prepend (text) and Replace (every `from` by `to`), as SentencePiece-style files
// use, and NFC (Qwen 2.5).
struct NormalizerStep {
  enum class Kind { Prepend, Replace, Nfc };
  Kind kind = Kind::Prepend;
  std::string from, to;  // Prepend uses `to` only
};

enum class PrependScheme { Always, First, Never };

struct PreTokenizerStep {
  enum class Kind { ByteLevel, Split, Metaspace };
  Kind kind = Kind::ByteLevel;
  bool add_prefix_space = false;  // ByteLevel: a space before each piece that lacks one
  bool use_regex = true;          // ByteLevel: split with GPT-2's pattern first
  SplitPattern pattern = SplitPattern::Gpt2;  // Split (Isolated), or ByteLevel's regex
  std::string replacement;        // Metaspace: the character spaces become ("\u2581")
  PrependScheme prepend = PrependScheme::Always;  // Metaspace
  bool split = true;              // Metaspace: a new piece before each replacement character
};

// TemplateProcessing's single-sequence template: ids = before + ids + after. A Sequence of
// post-processors applies several in order; ByteLevel's changes only offsets and adds none.
struct TemplateWrap {
  std::vector<int> before, after;
};

struct DecoderStep {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace };
  Kind kind = Kind::ByteLevel;
  std::string from, to;        // Replace; Strip's character and Metaspace's replacement in `from`
  size_t start = 0, stop = 0;  // Strip: at most this many characters cut at each end
  bool strip_first = true;     // Metaspace: drop the replacement characters of the first token
};

struct HfPipeline {
  std::unique_ptr<BpeModel> model;
  std::vector<NormalizerStep> normalizer;
  std::vector<AddedToken> added;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<TemplateWrap> post_processor;
  bool has_decoder = false;  // without one, tokens are joined with spaces (as tokenizers does)
  std::vector<DecoderStep> decoder;
};

// Reads and checks tokenizer.json; throws cadre::ConfigError naming the file and the field.
HfPipeline load_hf_pipeline(const std::string& path);
// The same from the file's text; `path` only names it in errors.
HfPipeline load_hf_pipeline_text(const std::string& text, const std::string& path);

// The steps, run (hf_steps.cpp). pre_tokenize's at_start: the text begins the input (what
// Metaspace's "first" prepend scheme asks).
void normalize(const std::vector<NormalizerStep>& steps, std::string& text);
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, const std::string& text, bool at_start,
                  std::vector<std::string>& pieces);
std::string decode_tokens(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);
// The bytes one token stands for inside a decoded text, before any UTF-8 repair: a byte-level
// token's bytes, a <0xXX> token's byte, the space a space mark stands for. Steps about the
// whole text (Strip, Fuse, Metaspace's first token) are left out.
std::string token_bytes(const std::vector<DecoderStep>& steps, std::string token);

}  // namespace cadre::detail
