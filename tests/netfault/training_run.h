// The tiny Llama training job the multi-host fault tests and the recovery soak run: its command
// line (what is trained, how often it checkpoints), and its losses read back from metrics.jsonl.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cadre::netfault {

// What is trained: the checkpoint scenarios shard fully and checkpoint every few steps; the
// in-memory ones replicate (NO_SHARD), never checkpoint before the end, and spread a global batch
// of 6 micro-batches over the ranks (2 each on 3 ranks, 3 each on 2).
struct TrainShape {
  std::string strategy = "FULL_SHARD";
  int grad_accum_steps = 1;
  int checkpoint_interval = 5;
  int memory_interval = 0;  // checkpoint.memory_interval (sharded in-memory recovery); 0: the default
  int pp_size = 1;          // parallel.pp_size: pipeline stages
  bool tied = false;        // model.tie_embeddings: under stages, the table on the first and the last
  std::string name() const {
    return strategy + "-a" + std::to_string(grad_accum_steps) + "-c" + std::to_string(checkpoint_interval) +
           (memory_interval > 0 ? "-m" + std::to_string(memory_interval) : "") +
           (pp_size > 1 ? "-p" + std::to_string(pp_size) : "") + (tied ? "-t" : "");
  }
};

// `cadre train` with configs/tiny.yaml (without the launcher), writing to run_dir, resuming
// from run_dir's newest checkpoint if any; `extra` are more --set overrides.
std::vector<std::string> train_args(const std::string& cadre_bin, const std::string& source_dir,
                                    const std::string& data_dir, const std::string& run_dir, int steps,
                                    int comm_timeout_s, const TrainShape& shape,
                                    const std::vector<std::string>& extra = {});

using Losses = std::map<int64_t, double>;  // step -> loss

// Every record of a metrics.jsonl (a step logged twice keeps its last loss).
Losses losses_of(const std::string& metrics_path);
// The step of every record of a metrics.jsonl, in file order.
std::vector<int64_t> steps_logged(const std::string& metrics_path);

}  // namespace cadre::netfault
