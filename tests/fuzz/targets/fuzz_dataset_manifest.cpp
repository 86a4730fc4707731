// Dataset manifests (manifest.json of `cadre data prepare`): JSON of any shape, negative or
// overflowing counts, unknown kinds.
#include "data/manifest.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cadre::fuzz::only_cadre_errors([&] {
    cadre::DatasetManifest m = cadre::manifest_parse_text(cadre::fuzz::text(data, size), "fuzz/manifest.json");
    if (m.kind == "tokens" && (m.seq_len <= 0 || (m.token_bytes != 2 && m.token_bytes != 4)))
      cadre::fuzz::violated("a token manifest without a usable shape was accepted");
  });
  return 0;
}
