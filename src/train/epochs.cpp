// Steps from epochs (see epochs.h).
#include "train/epochs.h"

#include "core/error.h"
#include "core/log.h"
#include "data/manifest.h"

namespace cadre {

void resolve_epochs(Config& c, int64_t world) {
  if (c.train.epochs == 0) return;
  CADRE_CONFIG_CHECK(!c.data.dir.empty(), "train.epochs needs data.dir (the split it counts passes over)");
  const int64_t model_parallel = c.parallel.tp_size * c.parallel.pp_size;  // ranks that read the same samples
  CADRE_CONFIG_CHECK(world >= 1 && world % model_parallel == 0, "train.epochs: parallel.tp_size x parallel.pp_size ",
                     model_parallel, " does not divide the world size ", world);
  uint64_t samples = 0;
  for (const ShardEntry& e : manifest_read(c.data.dir).train) samples += e.samples;
  const uint64_t global = static_cast<uint64_t>(c.data.batch_size * c.optim.grad_accum_steps * (world / model_parallel));
  const uint64_t wanted = static_cast<uint64_t>(c.train.epochs) * samples;
  c.train.steps = static_cast<int64_t>((wanted + global - 1) / global);
  CADRE_CONFIG_CHECK(c.train.stop_at <= c.train.steps, "train.stop_at must be in [0, train.steps=", c.train.steps,
                     " (", c.train.epochs, " epochs)], got ", c.train.stop_at);
  log::info(str("train: ", c.train.epochs, " epochs of ", samples, " samples in global batches of ", global, ": ",
                c.train.steps, " steps"));
}

}  // namespace cadre
