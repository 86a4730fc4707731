// Checkpoint manifests and COMMITTED markers: structure, shapes and piece bounds with
// overflow, and coverage. A manifest that parses must place every element exactly once.
#include "ckpt/checkpoint_dir.h"
#include "ckpt/manifest.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = cadre::fuzz::text(data, size);
  cadre::fuzz::only_cadre_errors([&] {
    cadre::CheckpointManifest m = cadre::manifest_parse(text, "fuzz/manifest.json");
    for (const auto& [name, t] : m.tensors) {
      __int128 covered = 0;
      for (const auto& p : t.pieces) {
        if (p.start < 0 || p.count <= 0 || static_cast<__int128>(p.start) + p.count > t.numel())
          cadre::fuzz::violated("a piece outside its tensor was accepted");
        covered += p.count;
      }
      if (covered != t.numel()) cadre::fuzz::violated("a tensor whose pieces do not cover it exactly was accepted");
    }
  });
  cadre::fuzz::only_cadre_errors([&] {
    auto index = cadre::manifest_parse(text, "fuzz/rank.index.json", cadre::PieceCoverage::Partial);
    cadre::manifest_merge({index});
  });
  cadre::fuzz::only_cadre_errors([&] { cadre::committed_manifest_crc32c(text, "fuzz/COMMITTED"); });
  return 0;
}
