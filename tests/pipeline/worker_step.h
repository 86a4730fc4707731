// The pipeline test workers' common start: one thread, the job's world communicator from the
// launcher's environment, and the step "<schedule> <chunks> <micro>" on the command line asks
// for (a stage per rank).
#pragma once

#include <ATen/Parallel.h>

#include <cstdlib>
#include <memory>

#include "comm/comm.h"
#include "pipeline/executor.h"

namespace cadre::test {

struct WorkerStart {
  std::unique_ptr<comm::Communicator> world;
  pipeline::StepShape step;
};

inline WorkerStart start_pipeline_worker(char** argv) {
  at::set_num_threads(1);
  WorkerStart out;
  out.world = std::make_unique<comm::Communicator>(comm::JobEnv::from_env());
  out.step.schedule = pipeline::parse_schedule(argv[1]);
  out.step.shape = {out.world->size(), std::atoll(argv[3]), std::atoll(argv[2])};
  return out;
}

}  // namespace cadre::test
