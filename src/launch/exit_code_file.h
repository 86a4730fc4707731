// `cadre run --exit-code-file PATH`: the agent's exit code, one line, for a batch script that
// cannot learn it otherwise. Under srun the step's own status is one number for all nodes, and
// --kill-on-bad-exit turns the other nodes' codes into SIGTERM's 143: the sbatch script of
// `cadre deploy slurm` reads every node's file to tell bad input (2) from a failure to requeue.
#pragma once

#include <string>

#include "launch/slurm.h"

namespace cadre::launch {

// PATH with "%n" replaced by this node's id in the Slurm job (SLURM_NODEID, as srun's --output
// patterns), else by `node_rank` when known (>= 0), else by the hostname.
std::string exit_code_file_path(const std::string& pattern, int64_t node_rank, const GetEnv& getenv);

// Writes "CODE\n" atomically (temp file + rename), creating the directory. Throws Error naming
// the file when it cannot.
void exit_code_file_write(const std::string& path, int code);

}  // namespace cadre::launch
