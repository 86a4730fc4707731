// `cadre top`'s screen, apart from the terminal: a model of the job (one row per rank) built
// from agents' /metrics samples or from a run directory's metrics.jsonl, and its rendering as
// plain text lines that fit a width. cli/cmd_top.cpp does the fetching, ANSI and keys.
#pragma once

#include <string>
#include <vector>

#include "obs/exposition_parse.h"

namespace cadre::obs {

struct TopRow {
  int rank = 0, local_rank = 0;
  std::string node;
  double step = -1, step_s = -1, compute_s = -1, comm_s = -1, data_s = -1;
  double units_per_s = -1, rss_bytes = -1, cpu = -1;
  bool up = true, straggler = false;
  double straggler_ratio = -1;
  double in_collective_s = 0;  // the oldest collective it is inside
};

struct TopModel {
  std::string job, source;
  std::string unit = "tokens";
  double world = -1, nodes = -1, round = -1, restarts = -1, loss = NAN_VALUE(), val_loss = NAN_VALUE();
  bool hang = false;
  std::vector<TopRow> rows;  // by rank
  static double NAN_VALUE();
};

TopModel top_model_from_samples(const std::vector<ParsedSample>& samples);
// The last record of <dir>/metrics.jsonl (rank 0's view: every rank's times when straggler
// tracking is on). Throws cadre::ConfigError when the directory has none.
TopModel top_model_from_run_dir(const std::string& dir);

// Lines of the screen (no ANSI), each at most `width` characters. `clock` goes in the header.
std::vector<std::string> top_render(const TopModel& model, int width, const std::string& clock);

}  // namespace cadre::obs
