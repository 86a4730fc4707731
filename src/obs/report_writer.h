// `cadre report`: one self-contained HTML file about one or more run directories (inline SVG
// plots, inline CSS, no scripts, nothing fetched): loss and validation loss, throughput,
// per-rank step time, the step's time split, memory, each pipeline stage's compute and wait,
// checkpoint / restart / straggler events, the summary and the config. Several runs share each
// plot's axes, for comparison.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cadre::obs {

struct RunData {
  std::string dir, name;
  std::string config_yaml;               // "" when absent
  nlohmann::json summary;                // null when absent (a run still going, or stopped)
  std::vector<nlohmann::json> metrics;   // metrics.jsonl, one object per step
  std::vector<nlohmann::json> events;    // events.jsonl
  size_t skipped_lines = 0;              // unparsable lines (a line being written, say)
};

// Reads a run directory. Throws cadre::ConfigError when it is not one (no metrics.jsonl).
RunData run_data_read(const std::string& dir);

std::string report_html(const std::vector<RunData>& runs);

}  // namespace cadre::obs
