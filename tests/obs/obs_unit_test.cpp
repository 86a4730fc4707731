// obs/ in-process: the exposition format and its reader, the catalog's naming conventions, the
// Grafana dashboard naming only exported metrics, the flight recorder (ring, wrap-around, a
// second process's view through the shared file, dumps), the worker channel, straggler
// attribution, hang diagnosis, the plots and top's screen.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "obs/exposition_parse.h"
#include "obs/flight_recorder.h"
#include "obs/hang_diagnosis.h"
#include "obs/metric_catalog.h"
#include "obs/metric_registry.h"
#include "obs/metrics_fetch.h"
#include "obs/metrics_server.h"
#include "obs/progress_heartbeat.h"
#include "obs/report_writer.h"
#include "obs/straggler_tracker.h"
#include "obs/svg_plot.h"
#include "obs/top_view.h"
#include "obs/worker_channel.h"
#include "obs/worker_report.h"
#include "support/process.h"

using namespace cadre::obs;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CollectiveInfo info(const char* op, int64_t numel) {
  CollectiveInfo i;
  i.op = op;
  i.detail = "sum";
  i.dtype = "Float";
  i.numel = numel;
  i.bytes = numel * 4;
  return i;
}

}  // namespace

TEST(Exposition, WritesHelpTypeAndEscapedLabelsAndReadsThemBack) {
  MetricRegistry m;
  m.set("cadre_loss", {{"job", "a\"b\\c\nd"}, {"rank", "0"}}, 2.5);
  m.set("cadre_train_steps_total", {{"rank", "1"}}, 12);
  m.set("cadre_worker_up", {{"rank", "1"}}, 1);
  std::string text = m.exposition();
  EXPECT_NE(text.find("# HELP cadre_loss "), std::string::npos);
  EXPECT_NE(text.find("# TYPE cadre_train_steps_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE cadre_loss gauge"), std::string::npos);
  EXPECT_NE(text.find(R"(cadre_loss{job="a\"b\\c\nd",rank="0"} 2.5)"), std::string::npos) << text;
  EXPECT_NE(text.find("cadre_train_steps_total{rank=\"1\"} 12\n"), std::string::npos) << text;
  auto samples = exposition_parse(text);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].name, "cadre_train_steps_total");  // catalog order
  bool found = false;
  for (const auto& s : samples)
    if (s.name == "cadre_loss") {
      EXPECT_EQ(s.label("job"), "a\"b\\c\nd");
      EXPECT_DOUBLE_EQ(s.value, 2.5);
      found = true;
    }
  EXPECT_TRUE(found);
  EXPECT_THROW(m.set("cadre_no_such_metric", {}, 1), cadre::Error);
  EXPECT_THROW(exposition_parse("cadre_loss{rank=\"0\" 1\n"), cadre::Error);
  EXPECT_THROW(exposition_parse("cadre_loss abc\n"), cadre::Error);
  EXPECT_EQ(sample_value_text(1e20), "1e+20");
  EXPECT_EQ(sample_value_text(0.125), "0.125");
}

TEST(MetricCatalog, FollowsPrometheusNamingConventions) {
  std::set<std::string> names;
  for (const auto& d : metric_catalog()) {
    std::string name = d.name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate " << name;
    if (d.scope == MetricScope::Gpu) {
      EXPECT_EQ(name.rfind("DCGM_FI_DEV_", 0), 0u) << name;
      continue;
    }
    EXPECT_EQ(name.rfind("cadre_", 0), 0u) << name;
    EXPECT_TRUE(std::regex_match(name, std::regex("[a-z_]+"))) << name;
    const bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(total, d.type == MetricType::Counter) << name << ": counters and only counters end in _total";
    for (const char* bad : {"_ms", "_milliseconds", "_kb", "_mb", "_mib", "_percent"})
      EXPECT_EQ(name.find(bad), std::string::npos) << name << ": base units (seconds, bytes, ratios)";
  }
}

// Every query of the Grafana dashboard names only metrics Cadre exports.
TEST(GrafanaDashboard, EveryQueryNamesAnExportedMetric) {
  auto dash = nlohmann::json::parse(read_file(CADRE_SOURCE_DIR "/deploy/grafana/cadre-dashboard.json"));
  std::set<std::string> exported;
  for (const auto& d : metric_catalog()) exported.insert(d.name);
  const std::set<std::string> promql = {"sum", "max", "min", "avg", "count", "by", "without", "rate", "irate",
                                        "increase", "on", "ignoring", "group_left", "group_right", "and", "or",
                                        "unless", "bool", "topk", "bottomk", "delta", "deriv", "label_values",
                                        "histogram_quantile", "quantile_over_time", "avg_over_time", "max_over_time"};
  std::vector<std::string> exprs;
  for (const auto& panel : dash.at("panels"))
    for (const auto& target : panel.at("targets")) exprs.push_back(target.at("expr"));
  for (const auto& var : dash.at("templating").at("list"))
    if (var.contains("definition")) exprs.push_back(var.at("definition"));
  ASSERT_GE(exprs.size(), 12u);
  std::set<std::string> used;
  for (std::string e : exprs) {
    // Drop label matchers, ranges, by/without clauses and strings; what is left are names.
    e = std::regex_replace(e, std::regex(R"(\{[^}]*\})"), " ");
    e = std::regex_replace(e, std::regex(R"(\[[^\]]*\])"), " ");
    e = std::regex_replace(e, std::regex(R"(\b(by|without|on|ignoring)\s*\([^)]*\))"), " ");
    e = std::regex_replace(e, std::regex(R"("[^"]*")"), " ");
    e = std::regex_replace(e, std::regex(R"(,\s*[a-z_]+\s*\))"), ")");  // label_values(metric, label)
    std::smatch m;
    for (std::string rest = e; std::regex_search(rest, m, std::regex(R"([A-Za-z_:][A-Za-z0-9_:]*)")); rest = m.suffix()) {
      std::string word = m.str();
      if (promql.count(word)) continue;
      EXPECT_TRUE(exported.count(word)) << "dashboard query names '" << word << "', which Cadre does not export: "
                                        << e;
      used.insert(word);
    }
  }
  // The panels the issue asks for: loss, throughput, per-rank step time, comm share, memory, restarts.
  for (const char* needed : {"cadre_loss", "cadre_tokens_total", "cadre_step_seconds", "cadre_comm_wait_seconds_total",
                             "cadre_worker_resident_memory_bytes", "cadre_restarts_total", "DCGM_FI_DEV_FB_USED"})
    EXPECT_TRUE(used.count(needed)) << needed;
  bool heatmap = false;
  for (const auto& panel : dash.at("panels")) heatmap = heatmap || panel.at("type") == "heatmap";
  EXPECT_TRUE(heatmap);
}

TEST(FlightRecorder, KeepsTheLastEntriesWithStatesAndTotals) {
  FlightRecorder r(4);
  uint64_t ids[6];
  for (int i = 0; i < 6; ++i) {
    ids[i] = r.issued(info(i % 2 ? "all_gather" : "all_reduce", 10 + i));
    r.started(ids[i], i + 1);
    if (i < 5) r.finished(ids[i], true);
  }
  FlightRecorderState s = r.state();
  ASSERT_EQ(s.records.size(), 4u);  // the ring kept the newest 4 of 6
  EXPECT_EQ(s.records.front().seq, 3);
  EXPECT_EQ(s.records.back().seq, 6);
  EXPECT_EQ(s.records.back().state, CollectiveState::Started);
  EXPECT_EQ(s.records[2].state, CollectiveState::Completed);
  EXPECT_EQ(s.records.back().bytes, 15 * 4);
  EXPECT_EQ(s.records.back().describe(), "all_gather(sum) #6 on world: 15 x Float (60 bytes)");
  uint64_t completed = 0;
  for (const auto& t : s.totals) completed += t.count;
  EXPECT_EQ(completed, 5u);
  // An update for an entry the ring has overwritten is ignored.
  r.finished(ids[0], false);
  EXPECT_EQ(r.state().records.front().seq, 3);
  FlightRecorder off(0);
  EXPECT_EQ(off.issued(info("all_reduce", 1)), 0u);
}

// An evaluation without collectives (NO_SHARD forward passes) marks the rank busy for the
// agent's stall detection, without adding a record to the ring.
TEST(FlightRecorder, ProgressOutsideCollectivesIsActivityWithoutARecord) {
  FlightRecorder r(8);
  uint64_t id = r.issued(info("all_reduce", 4));
  r.started(id, 1);
  r.finished(id, true);
  const FlightRecorderState before = r.state();
  ASSERT_GT(before.last_activity_ns, 0);
  while (wall_clock_ns() <= before.last_activity_ns) {
  }
  r.progressed();
  const FlightRecorderState after = r.state();
  EXPECT_GT(after.last_activity_ns, before.last_activity_ns);
  ASSERT_EQ(after.records.size(), 1u);
  EXPECT_EQ(after.records[0].seq, 1);
  FlightRecorder off(0);
  off.progressed();  // nothing to mark; must not crash
  EXPECT_EQ(off.state().last_activity_ns, 0);
}

// A long phase without collectives (reading or writing a checkpoint) keeps marking the rank busy
// until it ends: marks keep coming while the heartbeat lives, not only when it starts.
TEST(FlightRecorder, AHeartbeatMarksProgressUntilItEnds) {
  cadre::obs::flight_recorder_configure(8, "");
  auto last = [] { return cadre::obs::flight_recorder().state().last_activity_ns; };
  const int64_t before = last();
  {
    cadre::obs::ProgressHeartbeat busy(std::chrono::milliseconds(5));
    const int64_t first = last();
    EXPECT_GT(first, before);
    // Wait for a mark made by the thread after the constructor's own (no deadline of ours: the
    // test's timeout is the bound).
    while (last() == first) std::this_thread::yield();
  }
  EXPECT_GT(last(), before);
}

TEST(FlightRecorder, AnotherProcessReadsTheSharedRingAndDumpsRoundTrip) {
  cadre::test::TempDir dir("obs-fr");
  const std::string file = dir / "ring.bin";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    FlightRecorder r(16, file);
    r.set_rank(3);
    uint64_t a = r.issued(info("all_reduce", 8));
    r.started(a, 1);
    r.finished(a, true);
    uint64_t b = r.issued(info("reduce_scatter", 64));
    r.started(b, 2);
    char x = 'x';
    (void)!::write(ready[1], &x, 1);
    ::pause();  // stays inside op 2, as a hung rank would
    ::_exit(0);
  }
  char x;
  ASSERT_EQ(::read(ready[0], &x, 1), 1);
  FlightRecorderState s = flight_recorder_read_file(file);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.pid, child);
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[1].op, "reduce_scatter");
  EXPECT_EQ(s.records[1].state, CollectiveState::Started);
  FlightRecorderState back = flight_recorder_parse_dump(flight_recorder_dump_json(s, "test", "agent"), "x");
  ASSERT_EQ(back.records.size(), 2u);
  EXPECT_EQ(back.records[1].seq, 2);
  EXPECT_EQ(back.records[1].state, CollectiveState::Started);
  EXPECT_EQ(back.rank, 3);
  cadre::test::write_text(dir / "junk.bin", "not a recorder at all, but long enough to be read as one..........");
  EXPECT_THROW(flight_recorder_read_file(dir / "junk.bin"), cadre::Error);
  EXPECT_THROW(flight_recorder_read_file(dir / "missing.bin"), cadre::Error);
}

TEST(WorkerChannel, DeliversReportsAndNeverBlocksTheSender) {
  ChannelReceiver receiver;
  ChannelSender sender(receiver.name());
  WorkerReport r;
  r.rank = 1;
  r.step = 42;
  r.last.total_s = 0.5;
  r.has_val_loss = true;
  r.val_loss = 3.25;
  r.straggler_cause = "compute-bound";
  ASSERT_TRUE(sender.send(r.to_json()));
  auto got = receiver.receive(std::chrono::milliseconds(1000));
  ASSERT_EQ(got.size(), 1u);
  WorkerReport back = WorkerReport::from_json(got[0]);
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.step, 42);
  EXPECT_DOUBLE_EQ(back.last.total_s, 0.5);
  EXPECT_TRUE(back.has_val_loss);
  EXPECT_EQ(back.straggler_cause, "compute-bound");
  // Nobody reads: the queue fills and sends are dropped instead of blocking.
  int dropped = 0;
  for (int i = 0; i < 5000 && !dropped; ++i) dropped += !sender.send(std::string(4000, 'x'));
  EXPECT_GT(dropped, 0);
  EXPECT_THROW(WorkerReport::from_json("{\"rank\": 1}"), cadre::Error);
  EXPECT_THROW(ChannelSender("@cadre-nobody-listens-here"), cadre::Error);
}

TEST(StragglerTracker, NamesAPersistentlySlowRankWithItsCause) {
  StragglerTracker t({1.5, 3, 0.002});
  auto times = [](double slow_compute, double slow_data) {
    std::vector<RankTimes> v(4, RankTimes{0.10, 0.05, 0.0});
    v[2] = {slow_compute, 0.0, slow_data};
    return v;
  };
  EXPECT_TRUE(t.update(1, times(0.25, 0)).empty());
  EXPECT_TRUE(t.update(2, times(0.25, 0)).empty());
  auto changes = t.update(3, times(0.25, 0));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 2);
  EXPECT_TRUE(changes[0].straggling);
  EXPECT_EQ(changes[0].cause, "compute-bound");
  EXPECT_NEAR(changes[0].ratio, 2.5, 1e-9);
  EXPECT_NE(changes[0].describe().find("rank 2 is 2.50x slower than the other ranks' median"), std::string::npos);
  EXPECT_TRUE(t.straggling(2));
  EXPECT_FALSE(t.straggling(0));
  // Back to normal: once most of the window is fast, it has recovered.
  EXPECT_TRUE(t.update(4, times(0.1, 0)).empty());
  changes = t.update(5, times(0.1, 0));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].straggling);
  // A rank slow because it waits for its batches.
  StragglerTracker d({1.5, 2, 0.002});
  d.update(1, times(0.1, 0.3));
  changes = d.update(2, times(0.1, 0.3));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].cause, "waiting for data");
  // One slow step in the window is noise, not a straggler; nor is a tiny absolute difference.
  StragglerTracker n({1.5, 3, 0.002});
  EXPECT_TRUE(n.update(1, times(0.3, 0)).empty());
  EXPECT_TRUE(n.update(2, times(0.1, 0)).empty());
  EXPECT_TRUE(n.update(3, times(0.1, 0)).empty());
  EXPECT_TRUE(n.update(4, times(0.1, 0.5)).empty());
  std::vector<RankTimes> tiny(2, RankTimes{0.0001, 0, 0});
  tiny[1].compute_s = 0.001;
  for (int i = 5; i < 10; ++i) EXPECT_TRUE(n.update(i, tiny).empty());
}

TEST(HangDiagnosis, NamesTheRankThatDidNotEnterTheCollective) {
  const int64_t now = wall_clock_ns();
  auto record = [&](int64_t seq, CollectiveState state, double started_ago) {
    CollectiveRecord r;
    r.id = uint64_t(seq);
    r.group = "world";
    r.seq = seq;
    r.op = "all_reduce";
    r.detail = "avg";
    r.dtype = "Float";
    r.numel = 9;
    r.bytes = 36;
    r.started_ns = now - int64_t(started_ago * 1e9);
    r.finished_ns = state == CollectiveState::Completed ? r.started_ns + 1000 : 0;
    r.state = state;
    return r;
  };
  std::vector<RankEvidence> ranks(3);
  for (int i = 0; i < 3; ++i) {
    ranks[i].rank = i;
    ranks[i].has_recorder = true;
    ranks[i].recorder.records.push_back(record(41, CollectiveState::Completed, 12));
  }
  ranks[0].recorder.records.push_back(record(42, CollectiveState::Started, 10));
  ranks[2].recorder.records.push_back(record(42, CollectiveState::Started, 9));
  ranks[1].process_state = 'T';
  HangDiagnosis d = hang_diagnose(ranks, 3, now);
  ASSERT_TRUE(d.found);
  EXPECT_EQ(d.seq, 42);
  EXPECT_EQ(d.missing, std::vector<int>{1});
  EXPECT_EQ(d.waiting, (std::vector<int>{0, 2}));
  EXPECT_EQ(d.stopped, std::vector<int>{1});
  EXPECT_NEAR(d.waited_s, 10, 0.1);
  EXPECT_NE(d.message.find("rank 1 did not enter it"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("all_reduce(avg) #42 on world"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("its process is stopped"), std::string::npos) << d.message;
  EXPECT_EQ(d.to_json()["missing_ranks"], nlohmann::json::array({1}));
  // Rank 1 stopped inside #42: rank 2 is stuck in it too, rank 0 finished it and waits in #43.
  std::vector<RankEvidence> inside = ranks;
  inside[0].recorder.records.back() = record(42, CollectiveState::Completed, 10);
  inside[0].recorder.records.push_back(record(43, CollectiveState::Started, 9));
  inside[1].recorder.records.push_back(record(42, CollectiveState::Started, 10.5));
  d = hang_diagnose(inside, 3, now);
  ASSERT_TRUE(d.found);
  EXPECT_EQ(d.seq, 42);
  EXPECT_TRUE(d.missing.empty());
  EXPECT_EQ(d.waiting, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(d.message.find("ranks 1, 2 are still inside it"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("rank 0 finished it"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("rank 1's process is stopped"), std::string::npos) << d.message;
  // A rank with nothing to look at is reported as such, not as a culprit.
  ranks[1].has_recorder = false;
  d = hang_diagnose(ranks, 3, now);
  EXPECT_TRUE(d.missing.empty());
  EXPECT_EQ(d.no_data, std::vector<int>{1});
  // Nobody inside a collective: nothing found.
  std::vector<RankEvidence> idle(1);
  idle[0].has_recorder = true;
  idle[0].recorder.records.push_back(record(5, CollectiveState::Completed, 1));
  EXPECT_FALSE(hang_diagnose(idle, 1, now).found);
}

TEST(SvgPlot, DrawsSeriesMarkersAndEscapesText) {
  PlotSpec p;
  p.title = "Loss <train> & val";
  p.series.push_back({"a", {{1, 2}, {2, 3}, {3, 2.5}}, plot_color(0), false});
  p.series.push_back({"b", {{1, 1}}, plot_color(1), true});
  p.markers.push_back({2, "checkpoint", "#999"});
  std::string svg = svg_line_plot(p);
  EXPECT_EQ(svg.rfind("<svg class=\"plot\"", 0), 0u);
  EXPECT_NE(svg.find("Loss &lt;train&gt; &amp; val"), std::string::npos);
  EXPECT_NE(svg.find("<polyline class=\"series\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"marker\""), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray=\"6,4\""), std::string::npos);
  PlotSpec empty;
  EXPECT_NE(svg_line_plot(empty).find("no data"), std::string::npos);
}

TEST(TopView, OneRowPerRankWithSplitAndStragglerMark) {
  MetricRegistry m;
  for (int r = 0; r < 2; ++r) {
    Labels l{{"job", "j"}, {"node", "n"}, {"rank", std::to_string(r)}, {"local_rank", std::to_string(r)}};
    m.set("cadre_train_step", l, 17);
    m.set("cadre_step_seconds", l, 0.5);
    m.set("cadre_step_compute_seconds", l, r ? 0.45 : 0.2);
    m.set("cadre_step_comm_wait_seconds", l, r ? 0.05 : 0.3);
    m.set("cadre_step_data_wait_seconds", l, 0);
    m.set("cadre_tokens_per_second", l, 1000);
    m.set("cadre_worker_resident_memory_bytes", l, 200.0 * (1 << 20));
    m.set("cadre_straggler", l, r);
    m.set("cadre_straggler_slowdown_ratio", l, r ? 2.25 : 0.44);
    m.set("cadre_loss", l, 3.5);
  }
  m.set("cadre_world_size", {{"job", "j"}, {"node", "n"}}, 2);
  TopModel model = top_model_from_samples(exposition_parse(m.exposition()));
  ASSERT_EQ(model.rows.size(), 2u);
  auto lines = top_render(model, 120, "12:00:00");
  std::string screen;
  for (const auto& l : lines) {
    EXPECT_LE(l.size(), 120u);
    screen += l + "\n";
  }
  EXPECT_NE(screen.find("world 2"), std::string::npos) << screen;
  EXPECT_NE(screen.find("tokens/s 2000"), std::string::npos) << screen;
  EXPECT_NE(screen.find("<< STRAGGLER 2.25x"), std::string::npos) << screen;
  EXPECT_TRUE(std::regex_search(screen, std::regex(R"(\n +0 n +17 +0\.500 +40% +60% +0%)"))) << screen;
  EXPECT_TRUE(std::regex_search(screen, std::regex(R"(\n +1 n +17 +0\.500 +90% +10%)"))) << screen;
}

// Run files come from other processes and versions: a NaN is written as null, a killed writer or
// a hand edit leaves odd types. The report and `cadre top` draw what they can (a gap, "-")
// instead of stopping at the first odd value.
TEST(RunFiles, OddValuesAreGapsForTheReportAndTopNotErrors) {
  cadre::test::TempDir tmp("obs-odd-run");
  const std::string& dir = tmp.path();
  std::ofstream(dir + "/metrics.jsonl")
      << R"({"step":1,"loss":2.5,"tokens_per_s":100,"rank_busy_s":[0.4,0.5]})" "\n"
      << R"({"step":2,"loss":null,"tokens_per_s":"fast","rank_busy_s":[null,0.5],"rank_compute_s":[0.1,null],)"
         R"("rank_comm_wait_s":[0.1,0.2],"rank_data_wait_s":[0,0],"stragglers":["one",1]})" "\n";
  std::ofstream(dir + "/events.jsonl") << R"({"event":5,"step":1})" "\n"
                                       << R"({"event":"start","step":2,"restart_count":"x","world_size":null,"resumed_from":7})" "\n";
  std::ofstream(dir + "/summary.json") << R"({"arch":7,"strategy":["FULL_SHARD"],"world_size":"two"})";
  RunData run = run_data_read(dir);
  std::string html;
  ASSERT_NO_THROW(html = report_html({run}));
  EXPECT_NE(html.find("<h2>Summary</h2>"), std::string::npos);
  EXPECT_NE(html.find("restart: resumed at step 2"), std::string::npos) << "the odd start event still marks the plot";
  TopModel top;
  ASSERT_NO_THROW(top = top_model_from_run_dir(dir));
  ASSERT_EQ(top.rows.size(), 2u);
  EXPECT_EQ(top.rows[1].compute_s, -1.0) << "a null time shows as '-'";
  EXPECT_EQ(top.rows[1].step_s, -1.0);
  EXPECT_TRUE(top.rows[1].straggler);
  EXPECT_FALSE(top.rows[0].straggler) << "a non-numeric straggler entry names no rank";
  EXPECT_EQ(top.loss, -1.0);
}

TEST(FlightRecorder, ADumpsTimeIsZeroForTornOrForeignFiles) {
  EXPECT_EQ(flight_recorder_dump_time_ns(R"({"time_ns":1234,"rank":0})"), 1234);
  EXPECT_EQ(flight_recorder_dump_time_ns(R"({"time_ns":12)"), 0) << "torn";
  EXPECT_EQ(flight_recorder_dump_time_ns("[1,2]"), 0) << "not an object";
  EXPECT_EQ(flight_recorder_dump_time_ns(R"({"time_ns":"soon"})"), 0) << "wrong type";
}

// The agent's /metrics endpoint answers the scrape, and 404/405 elsewhere, over a real socket.
TEST(MetricsServer, AnswersTheScrapeAndRefusesOtherPathsAndMethods) {
  int renders = 0;
  MetricsServer server("127.0.0.1", 0, [&] { return "cadre_up " + std::to_string(++renders) + "\n"; });
  EXPECT_EQ(metrics_fetch(metrics_url_parse(server.url()), 10), "cadre_up 1\n");
  EXPECT_EQ(metrics_fetch(metrics_url_parse(server.url()), 10), "cadre_up 2\n");
  try {
    metrics_fetch(metrics_url_parse("http://127.0.0.1:" + std::to_string(server.port()) + "/other"), 10);
    FAIL() << "a path other than /metrics was answered";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("404"), std::string::npos) << e.what();
  }
  const std::string post = "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  auto r = cadre::test::run_process({"bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(server.port()) +
                                                       "; printf '" + post + "' >&3; cat <&3"},
                                    {}, 30);
  EXPECT_NE(r.output.find("HTTP/1.1 405"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Allow: GET, HEAD"), std::string::npos) << r.output;
}
