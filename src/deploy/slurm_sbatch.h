// The sbatch script for a Slurm job: one `cadre run` per node through srun (rendezvous on the
// first node of the allocation), checkpoint before the time limit, requeue after a failure or a
// time limit, and `--resume auto` so each attempt goes on from the newest checkpoint.
#pragma once

#include <string>

#include "deploy/job_spec.h"

namespace cadre::deploy {

// `config_path`: absolute path of the resolved config the script trains from;
// `log_dir`: absolute directory for the job's and each node's output.
std::string sbatch_script(const DeploySpec& spec, const std::string& config_path, const std::string& log_dir);

}  // namespace cadre::deploy
