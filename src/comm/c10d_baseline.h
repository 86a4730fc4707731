// libtorch's own c10d ProcessGroupGloo all-reduce, kept beside our collectives so the benchmark
// measures both in one run (the baseline the bandwidth goal is stated against).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>

#include "comm/comm.h"

namespace cadre::comm {

class C10dGlooAllReduce {
 public:
  // Collective; needs the job's store to be up (a world Communicator on rank 0 hosts it).
  C10dGlooAllReduce(const JobEnv& env, std::chrono::milliseconds timeout);
  ~C10dGlooAllReduce();
  // float32 only (c10d Gloo 1.13 rejects bfloat16); sum or max.
  void all_reduce(at::Tensor tensor, ReduceOp op);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::comm
