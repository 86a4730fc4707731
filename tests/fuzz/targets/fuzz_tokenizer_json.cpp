// Hugging Face tokenizer.json files as a model folder from anywhere carries them: any bytes.
// A file that loads encodes and decodes fixed texts (ASCII, multi-byte, invalid UTF-8, special
// tokens) without failing, yields only ids below vocab_size, and maps its ids to tokens and back.
#include "data/hf_tokenizer.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json = cadre::fuzz::text(data, size);
  cadre::fuzz::only_cadre_errors([&] {
    const cadre::HfTokenizer tok = cadre::HfTokenizer::from_json_text(json, "tokenizer.json");
    const int64_t vocab = tok.vocab_size();
    for (const char* input : {"Hello, world! It's 2024.", "  two  spaces\n\ttab\r\n", "Größe 東京 😀 \u2581x",
                              "bad \xff\xc3( \xed\xa0\x80 utf-8", "<|endoftext|><s>[MASK] </s>", ""}) {
      for (bool special : {false, true}) {
        const std::vector<int> ids = tok.encode(input, special);
        for (int id : ids)
          if (id < 0 || id >= vocab) cadre::fuzz::violated("an encoded id outside the vocabulary");
        tok.decode(ids, false);
        tok.decode(ids, true);
      }
    }
    // Every id near both ends: its token maps back to an id of the same token, and decodes.
    for (int64_t id = -1; id < vocab + 1 && id < 300; ++id) {
      const std::string token = tok.id_to_token(static_cast<int>(id));
      if (token.empty()) continue;
      const int back = tok.token_to_id(token);
      if (back < 0 || tok.id_to_token(back) != token) cadre::fuzz::violated("a token that does not map back");
      tok.is_special(static_cast<int>(id));
      tok.decode({static_cast<int>(id)}, false);
    }
    const std::vector<int> odd = {0, 1, -1, static_cast<int>(vocab - 1), static_cast<int>(vocab), 1 << 30};
    tok.decode(odd, false);
    tok.decode(odd, true);
  });
  return 0;
}
