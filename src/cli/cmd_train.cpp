// `cadre train --config <yaml> [--resume auto|none|PATH] [--set key=value ...]
//  [--dry-run [--world-size N]]`.
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/config.h"
#include "core/error.h"
#include "core/signal_thread.h"
#include "models/registry.h"
#include "train/dry_run.h"
#include "train/epochs.h"
#include "train/init_from.h"
#include "train/lora_import.h"
#include "train/load_only.h"
#include "train/trainer.h"

namespace cadre {

namespace {

struct TrainArgs {
  Config config;
  bool dry_run = false;
  int64_t world_size = 0;  // --dry-run's world (0: WORLD_SIZE, or 1)
};

// The config `cadre train ARGS` runs with: the file, then --resume and --set on top.
TrainArgs train_args(const Args& args) {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume;
  TrainArgs out;
  Flags flags("cadre train --config <yaml> [--resume auto|none|PATH] [--set section.key=value ...] "
              "[--dry-run [--world-size N]]");
  flags.add("--config", &config_path, "YAML config (see configs/)");
  flags.add("--resume", &resume,
            "auto (default): newest complete checkpoint, fresh start if none; none: fresh start, "
            "refused if checkpoints exist; or a checkpoint path (same as --set checkpoint.resume=...)");
  flags.add("--set", &overrides, "override a config key, e.g. --set train.steps=100 (repeatable)");
  flags.add("--dry-run", &out.dry_run,
            "print the per-rank memory estimate (and check train.memory_limit) without starting or allocating");
  flags.add("--world-size", &out.world_size, "with --dry-run: the ranks to plan for (default WORLD_SIZE, or 1)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(!config_path.empty(), "--config is required\n", flags.usage());
  CADRE_CONFIG_CHECK(out.dry_run || out.world_size == 0, "--world-size is --dry-run's (a run's ranks come from its launcher)");
  if (!resume.empty()) overrides.push_back("checkpoint.resume=" + resume);
  out.config = config_load(config_path, overrides);
  if (out.dry_run && out.world_size == 0) {
    const char* world = std::getenv("WORLD_SIZE");
    out.world_size = world && *world ? std::atoll(world) : 1;
  }
  return out;
}

}  // namespace

std::string train_run_dir(const Args& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return "";
  try {
    return train_args(args).config.run.dir;
  } catch (const Error&) {
    return "";  // the worker reports its own bad arguments
  }
}

int cmd_train(const Args& args) {
  // A write to a socket whose peer left (a rank that died, a store whose host went) must fail
  // with EPIPE, which the op turns into an error naming it, never kill the rank silently: the
  // recovery soak saw rank 0 die of SIGPIPE as its group re-formed after a peer's SIGKILL, on a
  // thread other than the Gloo threads that block it (comm/sigpipe_blocked.h), and the job with it.
  std::signal(SIGPIPE, SIG_IGN);
  // The stop and flight-recorder signals run their handlers on one waiting thread, never on a
  // thread inside oneDNN's JIT GEMM (core/signal_thread.h); before any thread starts.
  route_signals_to_one_thread({SIGTERM, SIGINT, SIGUSR1});
  TrainArgs parsed = train_args(args);
  Config& config = parsed.config;
  init_from_config(config);      // fine-tuning: model keys from train.init_from's checkpoint
  lora_init_from_config(config);  // a PEFT adapter to start from: its rank, alpha and layers
  model_config_resolve(config);  // the model's own keys: exit 2 before any work
  // A dry run plans memory, which the number of steps does not change: it needs no data.
  const char* world = std::getenv("WORLD_SIZE");
  if (!parsed.dry_run || !config.data.dir.empty())
    resolve_epochs(config, parsed.dry_run ? parsed.world_size : (world && *world ? std::atoll(world) : 1));
  if (parsed.dry_run) {
    train_dry_run(config, parsed.world_size);
    return 0;
  }
  TrainSummary s = config.train.steps == 0 ? train_load_only(config) : train_run(config);
  if (s.load_only) {
    if (s.lead) std::printf("loaded the model in %.2f s (train.steps 0: nothing trained)\n", s.load_s);
    return 0;
  }
  if (s.stopped_by_signal) {
    // Not a success: an agent must not take a stopped run for a finished one.
    if (s.lead)
      std::printf("stopped after step %lld on signal %d; checkpoint %s\n", static_cast<long long>(s.steps),
                  s.stopped_by_signal, s.checkpoint.c_str());
    return 128 + s.stopped_by_signal;
  }
  if (!s.lead) return 0;  // rank 0 reports for the job
  if (s.nothing_to_train) {
    std::printf("nothing to train: %s is at step %lld\n", s.checkpoint.c_str(), static_cast<long long>(s.steps));
    return 0;
  }
  std::printf("trained %lld steps: loss %.4f", static_cast<long long>(s.steps), s.final_loss);
  if (s.final_val_loss >= 0) std::printf(", val_loss %.4f", s.final_val_loss);
  if (s.final_val_accuracy >= 0) std::printf(", val_accuracy %.4f", s.final_val_accuracy);
  std::printf(", %.0f %s/s\nresults in %s (metrics.jsonl, summary.json)\n", s.throughput, s.throughput_unit.c_str(),
              s.run_dir.c_str());
  if (!s.checkpoint.empty()) std::printf("checkpoint %s\n", s.checkpoint.c_str());
  return 0;
}

}  // namespace cadre
