// estimate_inputs and check_run_memory (memory_check.h).
#include "train/memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <functional>

#include "core/byte_size.h"
#include "core/log.h"
#include "data/manifest.h"
#include "optim/make_optimizer.h"
#include "train/run_setup.h"

namespace cadre {
namespace {

int64_t sequence_length(const Config& c, const Model& model) {
  if (!c.data.dir.empty()) return manifest_read(c.data.dir).seq_len;
  return model.causal_lm() ? model.causal_lm()->max_seq_len() : 1;
}

// Which of the job's ranks share this process's memory cgroup: the same machine and the same
// cgroup file, compared by hash over the whole group (every rank takes part, limited or not).
int ranks_in_same_cgroup(comm::Communicator* group, const CgroupLimit& limit) {
  if (!group) return 1;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const int64_t mine = static_cast<int64_t>(std::hash<std::string>{}(std::string(host) + "\n" + limit.file));
  at::Tensor all = at::empty({group->size()}, at::kLong);
  group->all_gather(all, at::full({1}, mine, at::kLong));
  int same = 0;
  for (int64_t i = 0; i < group->size(); ++i) same += all[i].item<int64_t>() == mine;
  return same;
}

}  // namespace

EstimateInputs estimate_inputs(const Config& c, const Model& model, ShardPlan plan, bool cpu, int64_t dp,
                               StageActivations pipeline) {
  EstimateInputs in;
  in.plan = std::move(plan);
  in.compute_bytes = c.parallel.mixed_precision.param_dtype == "bfloat16" ? 2 : 4;
  in.optimizer_bytes_per_param = make_optimizer(c.optim, {}, {})->state_bytes_per_param();  // allocates nothing
  in.training = c.train.steps > 0;
  in.accumulate_unsharded = c.parallel.accumulate_unsharded && c.optim.grad_accum_steps > 1;
  in.prefetch = c.parallel.prefetch;
  in.cpu = cpu;
  in.huge_page_bytes = cpu ? host_huge_page_bytes() : 0;
  in.periodic_checkpoints = c.checkpoint.interval > 0 && c.checkpoint.interval < c.train.steps;
  in.async_checkpoints = c.checkpoint.async;
  in.checkpoint_frozen = c.lora.rank == 0;
  in.frozen_master_bytes = shard_options_of(c).frozen_in_compute_dtype ? in.compute_bytes : 4;
  in.replicas = std::max<int64_t>(1, dp / std::max(1, in.plan.shard_group));
  ActivationShape shape;
  shape.batch = c.data.batch_size * pipeline.batch_parts;
  shape.seq_len = sequence_length(c, model);
  shape.compute_bytes = in.compute_bytes;
  shape.checkpointing = c.parallel.activation_checkpointing;
  shape.tp_size = c.parallel.tp_size;
  shape.cuda = !cpu;
  shape.in_flight = pipeline.in_flight;
  in.activations = model.activation_bytes(shape);
  return in;
}

FitCheck check_run_memory(RunSetup& r) {
  FitCheck check;
  const StageActivations stage = r.pipeline ? r.pipeline->activations() : StageActivations{};
  check.estimate = estimate_memory(estimate_inputs(r.c, *r.model, r.sharded.plan(), r.device.is_cpu(), r.dp, stage));
  check.baseline = r.anon_before_model;
  if (!r.c.train.memory_limit.empty()) check.config_limit = parse_byte_size(r.c.train.memory_limit, "train.memory_limit");
  check.cgroup = memory_cgroup_limit();
  check.cgroup_ranks = ranks_in_same_cgroup(r.group, check.cgroup);
  if (r.lead) log::info("memory: " + check.to_text());
  log::info(str("memory: rank ", r.rank, " estimate_bytes=", check.estimate.total(),
                " rss_before_model_bytes=", r.rss_before_model));
  // Every rank stops if one would not fit: a rank left alone would wait at its next collective.
  bool any_short = check.headroom() < 0;
  if (r.group) {
    at::Tensor t = at::full({1}, int64_t(any_short), at::kLong);
    r.group->all_reduce(t, comm::ReduceOp::Max);
    any_short = t.item<int64_t>() > 0;
  }
  require_fit(check, r.rank);
  CADRE_CONFIG_CHECK(!any_short, "rank ", r.rank, ": another rank of this job would not fit its memory (its message "
                     "says which limit); this rank's own estimate: ", check.to_text());
  return check;
}

}  // namespace cadre
