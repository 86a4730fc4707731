// Checkpoint manifests and COMMITTED markers: structure, shapes and piece bounds with
// overflow, and coverage. A manifest that parses must place every element exactly once.
#include "ckpt/box.h"
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
        const bool inside = p.flat ? cadre::box_fits(p.box, {t.numel()}) : cadre::box_fits(p.box, t.shape);
        if (!inside) cadre::fuzz::violated("a piece outside its tensor was accepted");
        covered += p.numel();
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
