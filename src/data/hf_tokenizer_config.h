// What a Hugging Face model folder says about its tokenizer beyond tokenizer.json: the special
// tokens and chat template of tokenizer_config.json, and the end-of-sequence ids of
// generation_config.json and config.json. A model folder is untrusted input: a field of the
// wrong type is refused with cadre::ConfigError naming the file and the field.
#pragma once

#include <string>
#include <vector>

namespace cadre {

struct HfTokenizerConfig {
  std::string bos_token, eos_token;  // "" when absent or null
  std::string chat_template;         // "" when absent
};

// tokenizer_config.json's text. A special token is a string or an object with "content" (as
// transformers writes AddedToken); chat_template a string, or a list of {name, template} whose
// "default" entry is taken (the older layout). `name` names the file in errors.
HfTokenizerConfig hf_tokenizer_config_parse(const std::string& text, const std::string& name);

// A generation_config.json's or config.json's eos_token_id: an integer, a list of them, or
// null/absent (empty). Ids must be in [0, vocab_size).
std::vector<int> hf_eos_token_ids_parse(const std::string& text, const std::string& name, int64_t vocab_size);

}  // namespace cadre
