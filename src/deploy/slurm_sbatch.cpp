// sbatch script text. Everything Slurm decides at run time (node names, job id, attempt) is
// read from SLURM_* in the script; everything else is fixed when the script is written.
#include "deploy/slurm_sbatch.h"

#include <sstream>

namespace cadre::deploy {
namespace {

// Single-quoted for bash.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string metrics_port_text(const DeploySpec& s) {
  return s.metrics_port == 0 ? std::string("any free one, in each node's log") : std::to_string(s.metrics_port);
}

}  // namespace

std::string sbatch_script(const DeploySpec& s, const std::string& config_path, const std::string& log_dir) {
  std::ostringstream o;
  std::string nodes = s.min_nodes == s.max_nodes ? std::to_string(s.max_nodes)
                                                 : std::to_string(s.min_nodes) + "-" + std::to_string(s.max_nodes);
  o << "#!/bin/bash\n"
    << "# " << s.name << ": " << nodes << " node(s) x " << s.nproc_per_node << " worker(s), training "
    << config_path << "\n"
    << "# Written by `cadre deploy slurm`. Submit with: sbatch <this file>\n"
    << "#SBATCH --job-name=" << s.name << "\n"
    << "#SBATCH --nodes=" << nodes << "\n"
    << "#SBATCH --ntasks-per-node=1\n";
  if (!s.partition.empty()) o << "#SBATCH --partition=" << s.partition << "\n";
  if (!s.time.empty()) o << "#SBATCH --time=" << s.time << "\n";
  if (!s.cpu.empty()) o << "#SBATCH --cpus-per-task=" << s.cpu << "\n";
  if (!s.memory.empty()) {
    // Kubernetes-style 32Gi -> Slurm's 32G (Slurm's suffixes are binary already).
    std::string mem = s.memory;
    if (mem.size() > 2 && mem.back() == 'i') mem.pop_back();
    o << "#SBATCH --mem=" << mem << "\n";
  }
  if (s.gpus > 0) o << "#SBATCH --gpus-per-node=" << s.gpus << "\n";
  o << "#SBATCH --requeue\n"
    << "#SBATCH --signal=B:USR1@" << s.signal_before_s << "\n"
    << "#SBATCH --open-mode=append\n"
    << "#SBATCH --output=" << log_dir << "/%x-%j.out\n"
    << "#SBATCH --chdir=" << s.workdir << "\n"
    << "set -u\n"
    << "cadre=" << quote(s.cadre) << "\n"
    << "config=" << quote(config_path) << "\n"
    << "logs=" << quote(log_dir) << "\n"
    << "max_requeues=" << s.max_requeues << "\n"
    << "attempt=${SLURM_RESTART_COUNT:-0}\n"
    << "echo \"$(date -Is) job $SLURM_JOB_ID attempt $attempt on $SLURM_JOB_NODELIST\"\n"
    << "\n"
    << "# Slurm sends USR1 " << s.signal_before_s << " s before the time limit: SIGTERM to the job's steps makes\n"
    << "# every worker stop after the same step and checkpoint it; the job then requeues itself.\n"
    << "time_limit=0\n"
    << "trap 'time_limit=1; echo \"$(date -Is) time limit near: checkpointing\"; scancel --signal=TERM \"$SLURM_JOB_ID\"' USR1\n"
    << "\n"
    << "# The agents of this job prove a shared secret to each other's stores (README: Security\n"
    << "# model); srun hands the environment to every node. One you set yourself is kept.\n"
    << "if [[ -z ${CADRE_JOB_SECRET:-} && -z ${CADRE_JOB_SECRET_FILE:-} ]]; then\n"
    << "  CADRE_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n')\n"
    << "  export CADRE_JOB_SECRET\n"
    << "fi\n"
    << "\n"
    << "# One agent per node; under srun `cadre run` takes the node count, its node rank and the\n"
    << "# rendezvous endpoint (the allocation's first node, port 29500 + job id % 1000) from SLURM_*.\n"
    << "# A node's agent that dies ends the step (--kill-on-bad-exit); worker crashes and stalls restart\n"
    << "# in place. Each agent serves /metrics on every address of its node (port " << metrics_port_text(s)
    << ")\n"
    << "# and writes its exit code to $codes/node<N>: srun's status is one number for all nodes, and\n"
    << "# 143 (SIGTERM) once --kill-on-bad-exit has ended the others.\n"
    << "codes=\"$logs/job-$SLURM_JOB_ID/attempt-$attempt/exit-codes\"\n"
    << "srun --ntasks-per-node=1 --kill-on-bad-exit=1 --open-mode=append --output=\"$logs/%x-%j-node%n.out\" \\\n"
    << "  \"$cadre\" run --nproc-per-node " << s.nproc_per_node << " --max-restarts " << s.max_restarts
    << " --rdzv-id \"" << s.name << "-$SLURM_JOB_ID-$attempt\" \\\n"
    << "    --log-dir \"$logs/job-$SLURM_JOB_ID/attempt-$attempt\" --exit-code-file \"$codes/node%n\" \\\n"
    << "    --metrics-addr 0.0.0.0 --metrics-port " << s.metrics_port << " \\\n"
    << "    -- \"$cadre\" train --config \"$config\" --resume auto &\n"
    << "step=$!\n"
    << "wait \"$step\"\n"
    << "rc=$?\n"
    << "if ((time_limit)); then wait \"$step\"; rc=$?; fi  # the trap interrupted the first wait\n"
    << "\n"
    << "if ((rc == 0)); then echo \"$(date -Is) finished\"; exit 0; fi\n"
    << "# Exit 2 is bad input (config, flags, files): another attempt would fail the same way. Any\n"
    << "# node's agent may have found it; an agent that wrote nothing was killed (a crash: requeue).\n"
    << "for code in \"$codes\"/node*; do\n"
    << "  if [[ -f $code && $(<\"$code\") == 2 ]]; then rc=2; fi\n"
    << "done\n"
    << "if ((rc == 2)); then echo \"$(date -Is) bad input (exit 2, see the node logs): not requeueing\"; exit 2; fi\n"
    << "if ((attempt < max_requeues)); then\n"
    << "  echo \"$(date -Is) step ended with $rc (time limit: $time_limit); requeueing, attempt $((attempt + 1)) of $max_requeues\"\n"
    << "  scontrol requeue \"$SLURM_JOB_ID\"\n"
    << "  exit 0\n"
    << "fi\n"
    << "echo \"$(date -Is) step ended with $rc; no requeue left ($max_requeues used)\"\n"
    << "exit \"$rc\"\n";
  return o.str();
}

}  // namespace cadre::deploy
