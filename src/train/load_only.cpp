// train.steps 0: set up, report each rank's memory, stop (load_only.h).
#include "train/load_only.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "core/log.h"
#include "core/sysinfo.h"
#include "optim/make_optimizer.h"
#include "train/init_from.h"
#include "train/run_setup.h"

namespace cadre {
namespace {

double mb(int64_t bytes) { return double(bytes) / double(1 << 20); }

// The most bytes one gather makes whole: the largest unit's buffer in the compute dtype.
int64_t largest_unit_bytes(FSDPModule& sharded) {
  int64_t most = 0;
  for (const auto& f : sharded.flat_params()) most = std::max(most, f->full_bytes());
  return most;
}

// Bytes this process read through read(2) and pread(2) so far (/proc/self/io's rchar): the
// reader's own count, checked from outside; -1 where the kernel does not say.
int64_t process_read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

}  // namespace

TrainSummary train_load_only(const Config& config) {
  std::unique_ptr<RunSetup> run = run_set_up(config);
  // A Hugging Face folder was read as the shards were made; a Cadre checkpoint is read now.
  if (!run->c.train.init_from.empty())
    init_from_load(run->c, run->sharded, run->rank, run->group, run->checkpoint_source.get());
  const ShardMemory held = run->sharded.memory();
  // An optimizer over no parameters: its bytes per parameter, nothing allocated.
  const int64_t per_param = make_optimizer(run->c.optim, {}, {})->state_bytes_per_param();
  const int64_t optimizer_bytes = per_param * held.padded_numel / held.shard_size;
  log::info(str("load: rank ", run->rank, " holds ", mb(held.params), " MiB of parameters and ", mb(held.grads),
                " MiB of gradients (zero pages until a backward writes them); a gather makes ", mb(largest_unit_bytes(run->sharded)),
                " MiB whole at most; training adds ", mb(optimizer_bytes), " MiB of ", run->c.optim.name,
                " state; peak RSS ", mb(process_peak_rss_bytes()), " MiB (", mb(run->rss_before_model),
                " MiB before the model); ready ", run->model_ready_s, " s after start; ", process_read_bytes(),
                " bytes read in all (rchar)"));
  if (run->group) run->group->barrier();  // rank 0 hosts the store: leave together
  TrainSummary summary;
  summary.run_dir = run->c.run.dir;
  summary.lead = run->lead;
  summary.load_only = true;
  summary.load_s = run->model_ready_s;
  return summary;
}

}  // namespace cadre
