// A model folder's tokenizer_config.json, generation_config.json and config.json as read for
// the tokenizer: any bytes. The parsers succeed or throw cadre::ConfigError; end-of-sequence
// ids they accept lie inside the vocabulary they were given.
#include "data/hf_tokenizer_config.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json = cadre::fuzz::text(data, size);
  cadre::fuzz::only_cadre_errors([&] { cadre::hf_tokenizer_config_parse(json, "tokenizer_config.json"); });
  cadre::fuzz::only_cadre_errors([&] {
    constexpr int64_t kVocab = 1000;
    for (int id : cadre::hf_eos_token_ids_parse(json, "generation_config.json", kVocab))
      if (id < 0 || id >= kVocab) cadre::fuzz::violated("an eos id outside the vocabulary");
  });
  return 0;
}
