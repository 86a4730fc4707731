// Pipeline schedules: the order in which one pipeline stage runs the forward and backward passes
// of a step's micro-batches (parallel.pp_schedule). A stage's list is a pure function of
// (schedule, stages, stage, micro-batches, chunks), so every rank derives its own and its
// neighbours' orders without exchanging them.
//   GPipe (Huang et al. 2019): every forward, then every backward; a stage keeps the
//     activations of all m micro-batches.
//   1F1B (PipeDream-Flush, Narayanan et al. 2019/2021): stage s runs p - 1 - s forwards ahead,
//     then alternates one forward and one backward; at most p - s micro-batches are in flight,
//     and the bubble is that of GPipe, (p - 1) / (m + p - 1).
//   Interleaved 1F1B (Narayanan et al., SC 2021): each rank holds `chunks` model chunks (virtual
//     stages s, s + p, s + 2p, ...); forwards go in groups of p micro-batches through chunk 0,
//     then chunk 1, ...; the bubble shrinks by the number of chunks. m must be a multiple of p.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre::pipeline {

enum class Schedule { GPipe, OneFOneB, Interleaved };

// "gpipe", "1f1b" or "interleaved", case-insensitive; ConfigError naming `key` otherwise.
Schedule parse_schedule(const std::string& text, const std::string& key = "parallel.pp_schedule");
const char* schedule_name(Schedule schedule);

struct Action {
  enum Kind { Forward, Backward };
  Kind kind = Forward;
  int64_t micro = 0;  // the micro-batch
  int64_t chunk = 0;  // the rank's model chunk (0 unless interleaved); virtual stage chunk * stages + stage
  bool operator==(const Action& o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};

// The layout a schedule runs on. ConfigError (naming parallel.pp_*) when it cannot run: fewer
// than one stage or micro-batch, chunks other than 1 for GPipe and 1F1B, fewer than 2 for
// interleaved, or micro-batches not a multiple of the stages for interleaved.
struct PipelineShape {
  int64_t stages = 1;
  int64_t micro_batches = 1;
  int64_t chunks = 1;
  int64_t virtual_stages() const { return stages * chunks; }
};
void check_shape(Schedule schedule, const PipelineShape& shape);

// Stage `stage`'s actions in the order it runs them: every micro-batch's forward and backward
// through each of its chunks, once.
std::vector<Action> stage_actions(Schedule schedule, const PipelineShape& shape, int64_t stage);

// "F3" / "B3" (chunk 0), "F3.1" (chunk 1): for messages.
std::string describe(const Action& action);

}  // namespace cadre::pipeline
