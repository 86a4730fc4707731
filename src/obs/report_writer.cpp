// The HTML run report (see report_writer.h).
#include "obs/report_writer.h"

#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "obs/json_fields.h"
#include "obs/svg_plot.h"

namespace fs = std::filesystem;

namespace cadre::obs {
namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path, size_t* skipped) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) out.push_back(std::move(j));
    else ++*skipped;
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double num(const nlohmann::json& j, const char* key, double fallback = NAN) { return json_number(j, key, fallback); }

std::string fmt(double v, const char* format = "%.4g") {
  if (!std::isfinite(v)) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The throughput key of a run's records: tokens_per_s or images_per_s.
std::string throughput_key(const RunData& run) {
  for (const auto& m : run.metrics)
    for (const char* key : {"tokens_per_s", "images_per_s"})
      if (m.contains(key)) return key;
  return "tokens_per_s";
}

std::string run_label(const RunData& run, size_t runs, const std::string& what) {
  return runs > 1 ? run.name + " " + what : what;
}

PlotSpec plot(const std::string& title, const std::string& y_label) {
  PlotSpec p;
  p.title = title;
  p.x_label = "step";
  p.y_label = y_label;
  return p;
}

PlotSeries line(const std::string& name, const std::string& color, bool dashed = false) {
  PlotSeries s;
  s.name = name;
  s.color = color;
  s.dashed = dashed;
  return s;
}

std::vector<PlotMarker> event_markers(const RunData& run) {
  std::vector<PlotMarker> markers;
  for (const auto& e : run.events) {
    const std::string kind = json_text(e, "event");
    const double step = num(e, "step");
    if (!std::isfinite(step)) continue;
    if (kind == "checkpoint")
      markers.push_back({step, str("checkpoint at step ", int64_t(step)), "#9a9a9a"});
    else if (kind == "start" && step > 0)
      markers.push_back({step, str("restart: resumed at step ", int64_t(step), " (restart count ",
                                   json_integer(e, "restart_count", 0), ", world size ", json_integer(e, "world_size", 0), ")"),
                         "#d62728"});
    else if (kind == "straggler")
      markers.push_back({step, str("straggler: rank ", json_integer(e, "rank", -1), " ", fmt(num(e, "ratio"), "%.2f"), "x, ",
                                   json_text(e, "cause")),
                         "#ff7f0e"});
  }
  return markers;
}

std::string events_table(const std::vector<RunData>& runs) {
  std::string rows;
  for (const auto& run : runs)
    for (const auto& e : run.events) {
      const std::string kind = json_text(e, "event");
      if (kind == "checkpoint_staged") continue;
      std::string what;
      if (kind == "start")
        what = json_text(e, "resumed_from").empty()
                   ? str("started fresh, world size ", json_integer(e, "world_size", 0))
                   : str("resumed from ", json_text(e, "resumed_from"), " (loaded in ", fmt(num(e, "load_s"), "%.2f"),
                         " s), world size ", json_integer(e, "world_size", 0), ", restart count ", json_integer(e, "restart_count", 0));
      else if (kind == "checkpoint")
        what = str("checkpoint saved: ", fmt(num(e, "bytes") / 1e6, "%.1f"), " MB from rank 0 in ",
                   fmt(num(e, "seconds"), "%.2f"), " s");
      else if (kind == "straggler")
        what = str("rank ", json_integer(e, "rank", -1), " is a straggler: ", fmt(num(e, "ratio"), "%.2f"),
                   "x the other ranks' median busy time, ", json_text(e, "cause"));
      else if (kind == "straggler_recovered")
        what = str("rank ", json_integer(e, "rank", -1), " is back near the other ranks' median");
      else if (kind == "end")
        what = json_text(e, "how");
      else
        what = e.dump();
      std::time_t t = std::time_t(num(e, "time", 0));
      char stamp[32] = "-";
      if (t > 0) {
        std::tm tm{};
        gmtime_r(&t, &tm);
        std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
      }
      rows += str("<tr><td>", html_escape(run.name), "</td><td>", stamp, "</td><td>", fmt(num(e, "step"), "%.0f"),
                  "</td><td>", html_escape(kind), "</td><td>", html_escape(what), "</td></tr>\n");
    }
  if (rows.empty()) return "<p>No events recorded (events.jsonl is written by runs of this version).</p>\n";
  return "<table><tr><th>run</th><th>time (UTC)</th><th>step</th><th>event</th><th>what</th></tr>\n" + rows +
         "</table>\n";
}

std::string summary_table(const std::vector<RunData>& runs) {
  std::string out =
      "<table><tr><th>run</th><th>model</th><th>params</th><th>strategy</th><th>world</th><th>steps</th>"
      "<th>loss</th><th>val loss</th><th>throughput (median)</th><th>peak RSS</th><th>checkpoints</th>"
      "<th>restarts</th><th>stragglers</th></tr>\n";
  for (const auto& run : runs) {
    const nlohmann::json& s = run.summary;
    const nlohmann::json last = run.metrics.empty() ? nlohmann::json::object() : run.metrics.back();
    const std::string key = throughput_key(run);
    int64_t checkpoints = 0, restarts = 0, stragglers = 0;
    for (const auto& e : run.events) {
      const std::string kind = json_text(e, "event");
      checkpoints += kind == "checkpoint";
      restarts += kind == "start" && num(e, "step", 0) > 0;
      stragglers += kind == "straggler";
    }
    auto field = [&](const char* k, const char* format) { return s.is_object() ? fmt(num(s, k), format) : "-"; };
    std::string unit = key.substr(0, key.size() - 6);
    out += str("<tr><td>", html_escape(run.name), "</td><td>", s.is_object() ? html_escape(json_text(s, "arch")) : "-",
               "</td><td>", s.is_object() ? fmt(num(s, "params") / 1e6, "%.1fM") : "-", "</td><td>",
               s.is_object() ? html_escape(json_text(s, "strategy")) : "-", "</td><td>", field("world_size", "%.0f"),
               "</td><td>", fmt(num(last, "step"), "%.0f"), s.is_object() ? "" : " (no summary: running or stopped)",
               "</td><td>", fmt(num(last, "loss")), "</td><td>", field("final_val_loss", "%.4g"), "</td><td>",
               s.is_object() ? fmt(num(s, key.c_str()), "%.0f") + " " + unit + "/s" : "-", "</td><td>",
               s.is_object() ? fmt(num(s, "peak_rss_bytes") / (1 << 20), "%.0f") + " MiB" : "-", "</td><td>",
               checkpoints, "</td><td>", restarts, "</td><td>", stragglers, "</td></tr>\n");
  }
  return out + "</table>\n";
}

// Pipeline runs (parallel.pp_size > 1): each stage's compute (solid) and its wait on its
// neighbours (dashed: the bubble, and transfers not hidden), per step. "" for runs without stages.
std::string pipeline_stages_plot(const std::vector<RunData>& runs) {
  PlotSpec p = plot("Pipeline stages: compute (solid) and waiting on a neighbour (dashed)", "seconds");
  size_t color = 0;
  for (const auto& run : runs) {
    std::vector<PlotSeries> compute, wait;
    for (const auto& m : run.metrics) {
      auto c = m.find("pp_stage_compute_s"), w = m.find("pp_stage_wait_s");
      if (c == m.end() || w == m.end() || !c->is_array() || !w->is_array() || c->size() != w->size()) continue;
      for (size_t s = compute.size(); s < c->size(); ++s) {
        compute.push_back(line(run_label(run, runs.size(), str("stage ", s, " compute")), plot_color(color + s)));
        wait.push_back(line(run_label(run, runs.size(), str("stage ", s, " wait")), plot_color(color + s), true));
      }
      for (size_t s = 0; s < c->size(); ++s) {
        compute[s].points.emplace_back(num(m, "step"), json_number_at(*c, s));
        wait[s].points.emplace_back(num(m, "step"), json_number_at(*w, s));
      }
    }
    color += compute.size();
    for (size_t s = 0; s < compute.size(); ++s) {
      p.series.push_back(std::move(compute[s]));
      p.series.push_back(std::move(wait[s]));
    }
  }
  return p.series.empty() ? "" : svg_line_plot(p);
}

}  // namespace

RunData run_data_read(const std::string& dir) {
  CADRE_CONFIG_CHECK(fs::is_directory(dir), "'", dir, "' is not a directory (expected a run directory: run.dir)");
  CADRE_CONFIG_CHECK(fs::exists(dir + "/metrics.jsonl"), "'", dir,
                     "' has no metrics.jsonl: not a run directory (run.dir of `cadre train`)");
  RunData run;
  run.dir = dir;
  run.name = fs::path(dir).lexically_normal().filename().string();
  if (run.name.empty() || run.name == ".") run.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  run.metrics = read_jsonl(dir + "/metrics.jsonl", &run.skipped_lines);
  run.events = read_jsonl(dir + "/events.jsonl", &run.skipped_lines);
  run.config_yaml = read_text(dir + "/config.yaml");
  std::string summary = read_text(dir + "/summary.json");
  if (!summary.empty()) {
    auto j = nlohmann::json::parse(summary, nullptr, false);
    if (j.is_object()) run.summary = j;
  }
  return run;
}

std::string report_html(const std::vector<RunData>& runs) {
  const size_t n = runs.size();
  PlotSpec loss = plot("Loss", "loss"), throughput = plot("Throughput", "per second"),
           step_time = plot("Step time per rank (busy: compute + data wait, up to the loss all-reduce)", "seconds"),
           split = plot("Where rank 0's step time goes", "seconds"), memory = plot("Memory (rank 0 resident set)", "MiB");
  size_t color = 0;
  std::string unit;
  for (const auto& run : runs) {
    const std::string key = throughput_key(run);
    unit = key.substr(0, key.size() - 6);
    PlotSeries train = line(run_label(run, n, "train loss"), plot_color(color)),
               val = line(run_label(run, n, "validation loss"), plot_color(n > 1 ? color : 1), true),
               rate = line(run_label(run, n, unit + "/s"), plot_color(color)),
               total = line(run_label(run, n, "step (wall)"), plot_color(color)),
               rss = line(run_label(run, n, "RSS"), plot_color(color)),
               compute = line(run_label(run, n, "compute"), plot_color(color)),
               wait = line(run_label(run, n, "communication wait"), plot_color(color + 1)),
               data = line(run_label(run, n, "data wait"), plot_color(color + 2), true);
    std::vector<PlotSeries> ranks;
    for (const auto& m : run.metrics) {
      const double step = num(m, "step");
      train.points.emplace_back(step, num(m, "loss"));
      if (m.contains("val_loss")) val.points.emplace_back(step, num(m, "val_loss"));
      rate.points.emplace_back(step, num(m, key.c_str()));
      total.points.emplace_back(step, num(m, "step_time_s"));
      rss.points.emplace_back(step, num(m, "rss_bytes") / (1 << 20));
      if (m.contains("compute_s")) {
        compute.points.emplace_back(step, num(m, "compute_s"));
        wait.points.emplace_back(step, num(m, "comm_wait_s"));
        data.points.emplace_back(step, num(m, "data_wait_s"));
      }
      if (auto it = m.find("rank_busy_s"); it != m.end() && it->is_array()) {
        if (ranks.size() < it->size())
          for (size_t r = ranks.size(); r < it->size(); ++r)
            ranks.push_back(line(run_label(run, n, str("rank ", r)), plot_color(color + 1 + r), n > 1));
        for (size_t r = 0; r < it->size(); ++r) ranks[r].points.emplace_back(step, json_number_at(*it, r));
      }
    }
    loss.series.push_back(train);
    loss.series.push_back(val);
    throughput.series.push_back(rate);
    step_time.series.push_back(total);
    for (auto& r : ranks) step_time.series.push_back(std::move(r));
    if (n > 1) {
      // Side by side, one color per run: the split shows as three line styles of it.
      compute.color = wait.color = data.color = plot_color(color);
      wait.dashed = true;
    }
    split.series.push_back(compute);
    split.series.push_back(wait);
    split.series.push_back(data);
    memory.series.push_back(rss);
    auto markers = event_markers(run);
    loss.markers.insert(loss.markers.end(), markers.begin(), markers.end());
    step_time.markers.insert(step_time.markers.end(), markers.begin(), markers.end());
    throughput.markers.insert(throughput.markers.end(), markers.begin(), markers.end());
    color += 1;
  }
  throughput.y_label = unit + " per second";

  std::string title = n == 1 ? "Cadre run " + runs[0].name : str("Cadre runs compared (", n, ")");
  std::string html = str(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>", html_escape(title),
      "</title>\n<style>\nbody{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
      "h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:12px;max-width:100%}"
      "td,th{border:1px solid #ccc;padding:2px 5px;text-align:left}th{background:#f2f2f2}"
      "pre{background:#f7f7f7;padding:8px;font-size:12px;overflow:auto}svg.plot{display:block;margin:10px 0}"
      ".note{color:#666;font-size:12px}\n</style></head>\n<body>\n<h1>",
      html_escape(title), "</h1>\n");
  for (const auto& run : runs) html += str("<p class=\"note\">", html_escape(run.name), ": ", html_escape(run.dir), "</p>\n");
  html += "<h2>Summary</h2>\n" + summary_table(runs);
  html += "<h2>Training</h2>\n<p class=\"note\">Dashed vertical lines: checkpoints (grey), restarts (red), "
          "stragglers (orange).</p>\n";
  html += svg_line_plot(loss) + svg_line_plot(throughput) + svg_line_plot(step_time) + svg_line_plot(split) +
          svg_line_plot(memory) + pipeline_stages_plot(runs);
  html += "<h2>Events</h2>\n" + events_table(runs);
  for (const auto& run : runs)
    html += str("<h2>Config: ", html_escape(run.name), "</h2>\n<pre>",
                html_escape(run.config_yaml.empty() ? "(no config.yaml)" : run.config_yaml), "</pre>\n");
  return html + "</body></html>\n";
}

}  // namespace cadre::obs
