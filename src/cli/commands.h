// The subcommands of the `cadre` binary. Each lives in its own cmd_*.cpp and receives the
// arguments after its name; it returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace cadre {

using Args = std::vector<std::string>;

int cmd_data(const Args& args);   // data prepare
int cmd_train(const Args& args);  // train --config ...
// The run directory `cadre train ARGS` would write to, "" when ARGS do not resolve to a config
// (cmd_train.cpp; `cadre run` puts its logs there).
std::string train_run_dir(const Args& args);
int cmd_ckpt(const Args& args);   // ckpt inspect|verify|export|import
int cmd_generate(const Args& args);  // cmd_generate.cpp: text from a checkpoint or HF folder
int cmd_serve(const Args& args);     // cmd_serve.cpp: OpenAI-compatible server
int cmd_bench(const Args& args);   // cmd_bench.cpp: `cadre bench collectives ...`
int cmd_doctor(const Args& args);  // cmd_doctor.cpp: health checks before training
int cmd_run(const Args& args);  // cmd_run.cpp: elastic launcher (torchrun-compatible)
int cmd_deploy(const Args& args);  // cmd_deploy.cpp: Kubernetes manifests and Slurm batch scripts
int cmd_top(const Args& args);     // cmd_top.cpp: live view of a running job
int cmd_report(const Args& args);  // cmd_report.cpp: HTML report of run directories

}  // namespace cadre
