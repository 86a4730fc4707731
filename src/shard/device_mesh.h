// The job's ranks as a 2-D mesh, dp x tp (PyTorch's DeviceMesh with dimensions "dp" and "tp"):
// rank = dp_rank * tp_size + tp_rank, so a tensor-parallel group is tp_size consecutive ranks
// (inside a node: its collectives run every layer) and a data-parallel group takes the same
// tp_rank from every replica (its collectives run once a step). The communicators are created
// once, here, and named by mesh dimension.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"

namespace cadre {

class DeviceMesh {
 public:
  // Collective over the job. ConfigError naming parallel.tp_size when it does not divide the
  // world. On one rank no communicator is created.
  DeviceMesh(const comm::JobEnv& env, int64_t tp_size, const comm::CommOptions& options);
  DeviceMesh(DeviceMesh&&) = default;
  DeviceMesh& operator=(DeviceMesh&&) = default;

  int rank() const { return rank_; }
  int world_size() const { return tp_size_ * dp_size_; }
  int tp_size() const { return tp_size_; }
  int dp_size() const { return dp_size_; }
  int tp_rank() const { return rank_ % tp_size_; }
  int dp_rank() const { return rank_ / tp_size_; }

  // Null where the dimension has one rank (a one-rank group has nothing to communicate).
  comm::Communicator* world() const { return world_.get(); }
  comm::Communicator* tp() const { return tp_size_ > 1 ? (dp_size_ == 1 ? world_.get() : tp_.get()) : nullptr; }
  comm::Communicator* dp() const { return dp_size_ > 1 ? (tp_size_ == 1 ? world_.get() : dp_.get()) : nullptr; }
  // By dimension name: "tp", "dp" or "world". Error for another name.
  comm::Communicator* get(const std::string& dim) const;

  // "dp 2 x tp 2" for logs.
  std::string describe() const;

 private:
  int rank_ = 0, tp_size_ = 1, dp_size_ = 1;
  std::unique_ptr<comm::Communicator> world_, tp_, dp_;
};

}  // namespace cadre
