// The GPipe, 1F1B and interleaved 1F1B orders (schedule.h).
#include "pipeline/schedule.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace cadre::pipeline {
namespace {

// Interleaved: the k-th forward (or backward) a rank runs takes micro-batch groups of `stages`
// through its chunks in turn: chunk (k / p) mod v (backwards from the last chunk), micro-batch
// (k / (p v)) p + k mod p. Every rank runs them in this same order, so a chunk's outputs reach
// the next virtual stage in the order it consumes them.
Action interleaved_unit(const PipelineShape& s, int64_t k, Action::Kind kind) {
  const int64_t p = s.stages, v = s.chunks;
  const int64_t chunk = (k / p) % v;
  return {kind, (k / (p * v)) * p + k % p, kind == Action::Forward ? chunk : v - 1 - chunk};
}

// Warm-up forwards, then one forward and one backward at a time, then the remaining backwards:
// the shape of 1F1B and of its interleaved form, given the units in order.
std::vector<Action> one_forward_one_backward(const PipelineShape& s, int64_t warmup,
                                             Action (*unit)(const PipelineShape&, int64_t, Action::Kind)) {
  const int64_t total = s.micro_batches * s.chunks;
  warmup = std::min(warmup, total);
  std::vector<Action> out;
  int64_t forwards = 0, backwards = 0;
  while (forwards < warmup) out.push_back(unit(s, forwards++, Action::Forward));
  while (forwards < total) {
    out.push_back(unit(s, forwards++, Action::Forward));
    out.push_back(unit(s, backwards++, Action::Backward));
  }
  while (backwards < total) out.push_back(unit(s, backwards++, Action::Backward));
  return out;
}

Action plain_unit(const PipelineShape&, int64_t k, Action::Kind kind) { return {kind, k, 0}; }

}  // namespace

Schedule parse_schedule(const std::string& text, const std::string& key) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "gpipe") return Schedule::GPipe;
  if (lower == "1f1b") return Schedule::OneFOneB;
  if (lower == "interleaved") return Schedule::Interleaved;
  throw ConfigError(str(key, ": '", text, "' is not a pipeline schedule (gpipe, 1f1b, interleaved)"));
}

const char* schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::GPipe: return "gpipe";
    case Schedule::OneFOneB: return "1f1b";
    default: return "interleaved";
  }
}

void check_shape(Schedule schedule, const PipelineShape& s) {
  CADRE_CONFIG_CHECK(s.stages >= 1, "parallel.pp_size must be >= 1, got ", s.stages);
  CADRE_CONFIG_CHECK(s.micro_batches >= 1, "parallel.pp_microbatches must be >= 1, got ", s.micro_batches);
  if (schedule != Schedule::Interleaved) {
    CADRE_CONFIG_CHECK(s.chunks == 1, "parallel.pp_schedule ", schedule_name(schedule), " runs one chunk per stage, not ",
                       s.chunks, " (parallel.pp_chunks > 1 needs parallel.pp_schedule: interleaved)");
    return;
  }
  CADRE_CONFIG_CHECK(s.chunks >= 2, "parallel.pp_schedule interleaved needs parallel.pp_chunks >= 2 chunks per stage, got ",
                     s.chunks);
  CADRE_CONFIG_CHECK(s.micro_batches % s.stages == 0, "parallel.pp_schedule interleaved needs parallel.pp_microbatches (",
                     s.micro_batches, ") to be a multiple of parallel.pp_size (", s.stages, ")");
}

std::vector<Action> stage_actions(Schedule schedule, const PipelineShape& s, int64_t stage) {
  check_shape(schedule, s);
  CADRE_CHECK(stage >= 0 && stage < s.stages, "pipeline: no stage ", stage, " of ", s.stages);
  if (schedule == Schedule::GPipe) {
    std::vector<Action> out;
    for (int64_t m = 0; m < s.micro_batches; ++m) out.push_back({Action::Forward, m, 0});
    for (int64_t m = 0; m < s.micro_batches; ++m) out.push_back({Action::Backward, m, 0});
    return out;
  }
  if (schedule == Schedule::OneFOneB) return one_forward_one_backward(s, s.stages - 1 - stage, plain_unit);
  // Interleaved: the last stage starts its first backward once its last chunk has the first
  // group's forwards; each earlier stage runs two more forwards ahead (Megatron-LM's warm-up).
  return one_forward_one_backward(s, (s.stages - 1 - stage) * 2 + (s.chunks - 1) * s.stages, interleaved_unit);
}

std::string describe(const Action& a) {
  return str(a.kind == Action::Forward ? "F" : "B", a.micro, a.chunk ? str(".", a.chunk) : std::string());
}

}  // namespace cadre::pipeline
