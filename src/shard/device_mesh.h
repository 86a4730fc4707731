// The job's ranks as a 3-D mesh, pp x dp x tp (PyTorch's DeviceMesh with dimensions "pp", "dp"
// and "tp", torchtitan's order): rank = (pp_rank * dp_size + dp_rank) * tp_size + tp_rank. A
// tensor-parallel group is tp_size consecutive ranks (inside a node: its collectives run every
// layer); a data-parallel group takes the same (pp_rank, tp_rank) from every replica (its
// collectives run once a step); a pipeline group the same (dp_rank, tp_rank) from every stage,
// outermost, so stages can sit on different nodes (their point-to-point transfers are the
// lightest traffic). The communicators are created once, here, and named by mesh dimension.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"

namespace cadre {

class DeviceMesh {
 public:
  // Collective over the job. ConfigError naming parallel.tp_size or parallel.pp_size when they do
  // not divide the world. On one rank no communicator is created.
  DeviceMesh(const comm::JobEnv& env, int64_t tp_size, const comm::CommOptions& options, int64_t pp_size = 1);
  DeviceMesh(DeviceMesh&&) = default;
  DeviceMesh& operator=(DeviceMesh&&) = default;

  int rank() const { return rank_; }
  int world_size() const { return pp_size_ * dp_size_ * tp_size_; }
  int tp_size() const { return tp_size_; }
  int dp_size() const { return dp_size_; }
  int pp_size() const { return pp_size_; }
  int tp_rank() const { return rank_ % tp_size_; }
  int dp_rank() const { return (rank_ / tp_size_) % dp_size_; }
  int pp_rank() const { return rank_ / (tp_size_ * dp_size_); }

  // Null where the dimension has one rank (a one-rank group has nothing to communicate); the
  // world where it is the only dimension with more than one.
  comm::Communicator* world() const { return world_.get(); }
  comm::Communicator* tp() const { return dimension(tp_size_, tp_); }
  comm::Communicator* dp() const { return dimension(dp_size_, dp_); }
  comm::Communicator* pp() const { return dimension(pp_size_, pp_); }
  // By dimension name: "tp", "dp", "pp" or "world". Error for another name.
  comm::Communicator* get(const std::string& dim) const;

  // "dp 2 x tp 2", "pp 2 x dp 2 x tp 1" for logs.
  std::string describe() const;

 private:
  comm::Communicator* dimension(int size, const std::unique_ptr<comm::Communicator>& group) const {
    if (size == 1) return nullptr;
    return size == world_size() ? world_.get() : group.get();
  }

  int rank_ = 0, tp_size_ = 1, dp_size_ = 1, pp_size_ = 1;
  std::unique_ptr<comm::Communicator> world_, tp_, dp_, pp_;
};

}  // namespace cadre
