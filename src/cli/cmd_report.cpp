// `cadre report RUN_DIR [RUN_DIR...]`: the HTML report of one run, or of several on shared axes.
#include <filesystem>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "obs/report_writer.h"

namespace cadre {

int cmd_report(const Args& args) {
  std::string out;
  Flags flags(
      "cadre report RUN_DIR [RUN_DIR...] [--out FILE]\n"
      "  one self-contained HTML file (inline SVG plots, nothing fetched): loss, validation loss, throughput,\n"
      "  per-rank step time and its split, memory, checkpoint / restart / straggler events, summary, config;\n"
      "  several runs are drawn on the same axes");
  flags.add("--out", &out, "the HTML file (default: RUN_DIR/report.html for one run, ./report.html for several)");
  std::vector<std::string> dirs = flags.parse(args);
  CADRE_CONFIG_CHECK(!dirs.empty(), "no run directory given\n", flags.usage());
  std::vector<obs::RunData> runs;
  for (const auto& dir : dirs) {
    runs.push_back(obs::run_data_read(dir));
    if (runs.back().skipped_lines)
      log::warn(str("report: ", dir, ": skipped ", runs.back().skipped_lines, " unreadable line(s)"));
  }
  if (out.empty()) out = dirs.size() == 1 ? dirs[0] + "/report.html" : "report.html";
  file_write_atomic(out, obs::report_html(runs));
  std::printf("report: %s\n", out.c_str());
  return 0;
}

}  // namespace cadre
