// Entry point of the `cadre` binary: dispatches to subcommands and maps errors to exit codes
// (2: bad input found before work started, 1: failure while working).
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/argv_scrub.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/log.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const cadre::Args&);
};

const Command kCommands[] = {
    {"data", "prepare a corpus: train a tokenizer, write packed token shards", cadre::cmd_data},
    {"train", "train a model from a YAML config", cadre::cmd_train},
    {"ckpt", "inspect, verify, export (Hugging Face, .pt) or import (Hugging Face) checkpoints", cadre::cmd_ckpt},
    {"generate", "generate text from a checkpoint or Hugging Face folder (KV cache, sampling, streaming)",
     cadre::cmd_generate},
    {"serve", "OpenAI-compatible HTTP server with continuous batching", cadre::cmd_serve},
    {"bench", "benchmarks: `bench collectives` (nccl-tests layout), `bench gemm`, `bench images`", cadre::cmd_bench},
    {"doctor", "health checks before training (compute, BLAS, memory, collectives, stragglers)", cadre::cmd_doctor},
    {"run", "launch and supervise workers (torchrun-compatible)", cadre::cmd_run},
    {"deploy", "write Kubernetes manifests (TrainJob, PyTorchJob, etcd) or a Slurm sbatch script", cadre::cmd_deploy},
    {"top", "live view of a running job: one row per rank (q quits)", cadre::cmd_top},
    {"report", "HTML report of one or more run directories (plots, events, config)", cadre::cmd_report},
};

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: cadre <command> [args...]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`cadre <command> --help` describes a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  cadre::argv_remember(argc, argv);
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const Command* command = nullptr;
  for (const auto& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) command = &c;
  if (!command) {
    std::fprintf(stderr, "cadre: unknown command '%s'\n\n", argv[1]);
    print_usage(stderr);
    return 2;
  }
  cadre::Args args(argv + 2, argv + argc);
  try {
    return command->run(args);
  } catch (const cadre::Flags::HelpShown&) {
    return 0;
  } catch (const cadre::ConfigError& e) {
    cadre::log::error(std::string("cadre ") + command->name + ": " + e.what());
    return 2;
  } catch (const std::exception& e) {
    cadre::log::error(std::string("cadre ") + command->name + ": " + e.what());
    return 1;
  }
}
