// Training configs: YAML of any shape (aliases, non-scalar keys and values, deep nesting),
// every field reader (integers, finite numbers, booleans), and --set overrides.
#include "core/config.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = cadre::fuzz::text(data, size);
  cadre::fuzz::only_cadre_errors([&] { cadre::config_parse(text, "fuzz.yaml", {}); });
  // The first line as a --set value of a number, an integer, a boolean and a model key.
  const std::string line = text.substr(0, text.find('\n'));
  for (const char* key : {"optim.lr=", "train.steps=", "checkpoint.async=", "model.dim="})
    cadre::fuzz::only_cadre_errors([&] { cadre::config_parse("", "fuzz.yaml", {key + line}); });
  return 0;
}
