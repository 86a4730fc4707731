// In-memory recovery of sharded state, the re-formed group's side: every rank offers the packed
// copies it holds (train/peer_copies.h: its own and its giver's, of the lost group's layout);
// together they pick the newest step at which every rank of that group is covered, and the
// holder of each old rank's copy sends it to every rank, which takes what its new part needs
// (train/checkpointing.h, StateFiller): any world size, one old rank's copy in memory at a time,
// no file read.
#pragma once

#include <optional>
#include <vector>

#include "comm/comm.h"
#include "optim/optimizer.h"
#include "shard/fully_shard.h"
#include "train/batch_source.h"
#include "train/live_state.h"
#include "train/packed_state.h"

namespace cadre {

// Collective over the new group (null: one rank). nullopt when no step is covered (no rank
// holds copies, or the copies of some old rank were all lost: resume from disk instead).
// Adopted::source is -1 (several ranks), ::owners the old group's size.
//
// Under pipeline stages every rank's copy is of its owner's stage (PackedState::stage), and the
// group re-forms with the same stages (ranks numbered afresh: a survivor may now hold another
// stage than the one it carried, and its copies then serve others). Each copy still reaches
// every rank; a rank fills its part from the copies of `stage`, the one it holds now, and takes
// only the RNG of old rank (rank mod old world) from another's, as a resume from disk does, and
// the parameters it mirrors (FSDPModule::mirrored: the last stage's tied table, which the first
// stage's copies hold). Adopted::stages is then the number of stages the copies were of.
std::optional<Adopted> copies_adopt(const std::vector<PackedState>& held, FSDPModule& model, Optimizer& optimizer,
                                    BatchSource& data, comm::Communicator* group, int rank, int stage = 0);

}  // namespace cadre
