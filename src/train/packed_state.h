// A rank's training state at one step packed for the network: the slices a checkpoint would
// stage (train/checkpointing.h: boxes of global tensors, readable under any layout) in one
// buffer a collective can move, with the scalars a resume needs. In-memory recovery of sharded
// state (train/peer_copies.h) keeps one of its own and sends one to a rank on another node.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/snapshot.h"
#include "comm/comm.h"
#include "optim/optimizer.h"
#include "shard/fully_shard.h"

namespace cadre {

struct PackedState {
  int64_t step = -1;           // steps completed
  int owner = -1;              // the rank that staged it
  int world = 0;               // in a group of this many ranks (whose layout the slices follow)
  int stage = 0;               // the pipeline stage whose part it is (0 without stages)
  int64_t data_position = 0;   // global samples consumed after `step`
  int64_t optimizer_steps = 0;
  int64_t micro_batches = 0;   // the global batch, in data.batch_size units
  std::string record;          // the owner's metrics.jsonl record of `step`
  std::vector<SnapshotPiece> pieces;  // their offsets are into `bytes`
  at::Tensor bytes;            // int64 words: collectives move numbers, not bytes
  const char* base() const { return static_cast<const char*>(bytes.data_ptr()); }
};

// The scalars a packed state carries besides the slices.
struct PackedScalars {
  int64_t step = 0, data_position = 0, optimizer_steps = 0, micro_batches = 0;
  std::string record;
  int stage = 0;  // the owner's pipeline stage
};

// Stages this rank's part of the model, optimizer and RNG (as a checkpoint does) in `staging` and
// packs it. Reuse one `staging` across calls: a fresh one grows by reallocation piece by piece
// (bench/recovery.py, a 29 MB part, 3 ranks on 2 cores: 130 ms a copy, 88 ms reused); its pages
// are handed back after.
PackedState pack_state(Snapshot& staging, FSDPModule& model, Optimizer& optimizer, int rank, int world,
                       PackedScalars scalars);

// Sends `state` from `root` to the other ranks of `group` (three broadcasts: sizes, header,
// bytes), without waiting; wait() before `state` changes or goes.
class PackedSend {
 public:
  PackedSend(const PackedState& state, comm::Communicator& group, int root);
  void wait();

 private:
  at::Tensor sizes_, header_;
  std::vector<comm::Work> works_;
};

// Receives what `root` sends with PackedSend. Error naming the group and root when the header
// does not describe its bytes (never reads or writes outside the received buffer).
PackedState receive_packed(comm::Communicator& group, int root);

}  // namespace cadre
