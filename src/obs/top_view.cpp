// The model and text of `cadre top` (see top_view.h).
#include "obs/top_view.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "obs/json_fields.h"

namespace cadre::obs {

double TopModel::NAN_VALUE() { return std::nan(""); }

TopModel top_model_from_samples(const std::vector<ParsedSample>& samples) {
  TopModel m;
  std::map<int, TopRow> rows;
  for (const auto& s : samples) {
    if (s.name.rfind("cadre_", 0) != 0) continue;
    if (m.job.empty()) m.job = s.label("job");
    const std::string rank = s.label("rank");
    if (rank.empty() || !s.label("op").empty()) {
      // Agent-level figures (several agents: the same round; the largest counts win).
      if (s.name == "cadre_world_size") m.world = s.value;
      else if (s.name == "cadre_nodes") m.nodes = s.value;
      else if (s.name == "cadre_rendezvous_round") m.round = std::max(m.round, s.value);
      else if (s.name == "cadre_restarts_total") m.restarts = std::max(m.restarts, s.value);
      else if (s.name == "cadre_hang_detected") m.hang = m.hang || s.value > 0;
      continue;
    }
    TopRow& r = rows[std::atoi(rank.c_str())];
    r.rank = std::atoi(rank.c_str());
    r.local_rank = std::atoi(s.label("local_rank").c_str());
    r.node = s.label("node");
    const std::string& n = s.name;
    if (n == "cadre_train_step") r.step = s.value;
    else if (n == "cadre_step_seconds") r.step_s = s.value;
    else if (n == "cadre_step_compute_seconds") r.compute_s = s.value;
    else if (n == "cadre_step_comm_wait_seconds") r.comm_s = s.value;
    else if (n == "cadre_step_data_wait_seconds") r.data_s = s.value;
    else if (n == "cadre_tokens_per_second") r.units_per_s = s.value;
    else if (n == "cadre_samples_per_second" && r.units_per_s < 0) r.units_per_s = s.value;
    else if (n == "cadre_worker_resident_memory_bytes") r.rss_bytes = s.value;
    else if (n == "cadre_worker_cpu_utilization_ratio") r.cpu = s.value;
    else if (n == "cadre_worker_up") r.up = s.value > 0;
    else if (n == "cadre_straggler") r.straggler = s.value > 0;
    else if (n == "cadre_straggler_slowdown_ratio") r.straggler_ratio = s.value;
    else if (n == "cadre_collective_in_flight_seconds") r.in_collective_s = s.value;
    else if (n == "cadre_loss") m.loss = s.value;
    else if (n == "cadre_validation_loss") m.val_loss = s.value;
  }
  bool tokens = false;
  for (const auto& s : samples) tokens = tokens || s.name == "cadre_tokens_per_second";
  m.unit = tokens ? "tokens" : "samples";
  for (auto& [rank, row] : rows) m.rows.push_back(row);
  return m;
}

TopModel top_model_from_run_dir(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  CADRE_CONFIG_CHECK(in.good(), "'", dir, "' has no metrics.jsonl (a run directory, or an agent's URL, expected)");
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) last = j;
  }
  TopModel m;
  m.source = dir + "/metrics.jsonl";
  if (!last.is_object()) return m;
  auto num = [&](const char* key) { return json_number(last, key, -1.0); };
  m.loss = num("loss");
  if (last.contains("val_loss")) m.val_loss = num("val_loss");
  const bool images = last.contains("images_per_s");
  m.unit = images ? "images" : "tokens";
  TopRow r0;
  r0.step = num("step");
  r0.step_s = num("step_time_s");
  r0.compute_s = num("compute_s");
  r0.comm_s = num("comm_wait_s");
  r0.data_s = num("data_wait_s");
  r0.rss_bytes = num("rss_bytes");
  // A rank's time, -1 (shown as "-") where the record has none or a null (a NaN).
  auto rank_time = [&](const char* key, size_t r) {
    const nlohmann::json* times = json_field(last, key);
    return times ? json_number_at(*times, r, -1.0) : -1.0;
  };
  if (last.contains("rank_busy_s") && last["rank_busy_s"].is_array()) {
    // Every rank's times up to the loss all-reduce (straggler tracking); throughput is the job's.
    const auto& busy = last["rank_busy_s"];
    m.world = double(busy.size());
    for (size_t r = 0; r < busy.size(); ++r) {
      TopRow row = r == 0 ? r0 : TopRow{};
      row.rank = int(r);
      row.step = r0.step;
      if (r > 0) {
        row.compute_s = rank_time("rank_compute_s", r);
        row.comm_s = rank_time("rank_comm_wait_s", r);
        row.data_s = rank_time("rank_data_wait_s", r);
        const bool known = row.compute_s >= 0 && row.comm_s >= 0 && row.data_s >= 0;
        row.step_s = known ? row.compute_s + row.comm_s + row.data_s : -1.0;
      }
      if (const nlohmann::json* stragglers = json_field(last, "stragglers"); stragglers && stragglers->is_array())
        for (const auto& s : *stragglers) row.straggler = row.straggler || (s.is_number_unsigned() && s.get<size_t>() == r);
      m.rows.push_back(row);
    }
  } else {
    m.rows.push_back(r0);
  }
  m.rows[0].units_per_s = num(images ? "images_per_s" : "tokens_per_s");
  return m;
}

namespace {

std::string cell(double v, const char* format, double scale = 1) {
  if (v < 0 || !std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v * scale);
  return buf;
}

std::string percent(double part, double whole) {
  if (part < 0 || whole <= 0) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * part / whole);
  return buf;
}

std::string fit(std::string line, int width) {
  if (width > 0 && int(line.size()) > width) line.resize(size_t(width));
  return line;
}

}  // namespace

std::vector<std::string> top_render(const TopModel& m, int width, const std::string& clock) {
  std::vector<std::string> lines;
  char buf[512];
  lines.push_back(fit(str("cadre top  job ", m.job.empty() ? "-" : m.job, "  ", m.source, "  ", clock, "   (q quits)"),
                      width));
  double total_rate = 0, max_step = -1;
  for (const auto& r : m.rows) {
    if (r.units_per_s > 0) total_rate += r.units_per_s;
    max_step = std::max(max_step, r.step);
  }
  std::snprintf(buf, sizeof buf, "world %s  nodes %s  round %s  restarts %s  step %s  loss %s  val %s  %s/s %s%s",
                cell(m.world, "%.0f").c_str(), cell(m.nodes, "%.0f").c_str(), cell(m.round, "%.0f").c_str(),
                cell(m.restarts, "%.0f").c_str(), cell(max_step, "%.0f").c_str(), cell(m.loss, "%.4f").c_str(),
                cell(m.val_loss, "%.4f").c_str(), m.unit.c_str(), cell(total_rate > 0 ? total_rate : -1, "%.0f").c_str(),
                m.hang ? "  HANG (see the agent's error file)" : "");
  lines.push_back(fit(buf, width));
  lines.push_back("");
  std::snprintf(buf, sizeof buf, "%5s %-12s %8s %8s %8s %6s %6s %10s %9s %6s  %s", "RANK", "NODE", "STEP", "STEP_S",
                "COMPUTE", "COMM", "DATA", (m.unit == "tokens" ? "TOK/S" : "SAMPLES/S"), "RSS_MIB", "CPU%", "STATE");
  lines.push_back(fit(buf, width));
  for (const auto& r : m.rows) {
    std::string state;
    if (!r.up) state = "STOPPED/GONE";
    if (r.straggler) state += str(state.empty() ? "" : " ", "<< STRAGGLER ", cell(r.straggler_ratio, "%.2fx"));
    if (r.in_collective_s >= 5) state += str(state.empty() ? "" : " ", "in collective ", cell(r.in_collective_s, "%.0fs"));
    std::snprintf(buf, sizeof buf, "%5d %-12.12s %8s %8s %8s %6s %6s %10s %9s %6s  %s", r.rank,
                  r.node.empty() ? "-" : r.node.c_str(), cell(r.step, "%.0f").c_str(), cell(r.step_s, "%.3f").c_str(),
                  percent(r.compute_s, r.step_s).c_str(), percent(r.comm_s, r.step_s).c_str(),
                  percent(r.data_s, r.step_s).c_str(), cell(r.units_per_s, "%.0f").c_str(),
                  cell(r.rss_bytes, "%.1f", 1.0 / (1 << 20)).c_str(), cell(r.cpu, "%.0f", 100).c_str(), state.c_str());
    lines.push_back(fit(buf, width));
  }
  if (m.rows.empty()) lines.push_back("(no worker has reported yet)");
  return lines;
}

}  // namespace cadre::obs
