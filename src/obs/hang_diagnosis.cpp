// Stall analysis over flight recorders (see hang_diagnosis.h).
#include "obs/hang_diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"

namespace cadre::obs {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string ranks_word(const std::vector<int>& ranks) { return ranks.size() == 1 ? "rank " : "ranks "; }

// The newest record of this rank in (group, generation) that got a sequence number.
const CollectiveRecord* last_entered(const FlightRecorderState& s, const std::string& group, int generation) {
  const CollectiveRecord* best = nullptr;
  for (const auto& r : s.records)
    if (r.group == group && r.generation == generation && r.seq >= 0 && (!best || r.seq > best->seq)) best = &r;
  return best;
}

}  // namespace

nlohmann::json HangDiagnosis::to_json() const {
  return {{"found", found},     {"group", group},     {"generation", generation}, {"seq", seq},
          {"op", op},           {"waited_s", waited_s}, {"waiting_ranks", waiting}, {"missing_ranks", missing},
          {"no_data_ranks", no_data}, {"stopped_ranks", stopped}, {"message", message}};
}

HangDiagnosis hang_diagnose(const std::vector<RankEvidence>& ranks, int world_size, int64_t now_ns) {
  HangDiagnosis d;
  // The op some rank has been inside the longest.
  const CollectiveRecord* stalled = nullptr;
  for (const auto& e : ranks) {
    if (!e.has_recorder) continue;
    for (const auto& r : e.recorder.records)
      if (r.state == CollectiveState::Started && (!stalled || r.started_ns < stalled->started_ns)) stalled = &r;
  }
  for (const auto& e : ranks) {
    if (!e.has_recorder) d.no_data.push_back(e.rank);
    if (e.process_state == 'T' || e.process_state == 't') d.stopped.push_back(e.rank);
  }
  if (!stalled) {
    d.message = "no rank is inside a collective";
    if (!d.stopped.empty()) d.message += str("; ", ranks_word(d.stopped), rank_list(d.stopped), " stopped");
    return d;
  }
  d.found = true;
  d.group = stalled->group;
  d.generation = stalled->generation;
  d.seq = stalled->seq;
  d.op = stalled->describe();
  d.waited_s = double(now_ns - stalled->started_ns) * 1e-9;

  std::map<int, std::string> last_seen;  // rank -> what it did last in that group
  for (const auto& e : ranks) {
    if (!e.has_recorder) continue;
    const CollectiveRecord* last = last_entered(e.recorder, d.group, d.generation);
    const bool world = d.group == "world";
    if (!last) {
      // A world-group member that never entered any op of it; sub-group membership is unknown.
      if (world) {
        d.missing.push_back(e.rank);
        last_seen[e.rank] = "no collective on " + d.group + " yet";
      }
      continue;
    }
    if (last->seq >= d.seq) {
      if (last->seq == d.seq && last->state == CollectiveState::Started) d.waiting.push_back(e.rank);
      continue;
    }
    d.missing.push_back(e.rank);
    const int64_t when = last->finished_ns ? last->finished_ns : last->started_ns;
    last_seen[e.rank] = str(last->describe(), ", ", collective_state_name(last->state), " ",
                            seconds_text(double(now_ns - when) * 1e-9), " ago");
  }
  std::sort(d.waiting.begin(), d.waiting.end());
  std::sort(d.missing.begin(), d.missing.end());

  std::string m = str("collective stalled: ", ranks_word(d.waiting), rank_list(d.waiting), " waited ",
                      seconds_text(d.waited_s), " in ", d.op, " (sequence number ", d.seq, ")");
  if (!d.missing.empty()) {
    m += str("; ", ranks_word(d.missing), rank_list(d.missing), " did not enter it");
    for (int r : d.missing) {
      m += str(" (rank ", r, " last: ", last_seen[r]);
      if (std::find(d.stopped.begin(), d.stopped.end(), r) != d.stopped.end()) m += "; its process is stopped";
      m += ")";
    }
  } else {
    m += "; every rank with a record entered it";
    if (!d.stopped.empty()) m += str(" and ", ranks_word(d.stopped), rank_list(d.stopped), " stopped inside it");
  }
  if (!d.no_data.empty())
    m += str("; no flight recorder for ", ranks_word(d.no_data), rank_list(d.no_data),
             " (on another node without a shared run directory, or not started)");
  if (int(ranks.size()) < world_size) m += str("; ", world_size - int(ranks.size()), " rank(s) not looked at");
  d.message = m;
  return d;
}

}  // namespace cadre::obs
