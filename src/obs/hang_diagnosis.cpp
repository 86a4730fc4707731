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
  // The group in trouble: that of the op some rank has been inside the longest.
  const CollectiveRecord* oldest = nullptr;
  for (const auto& e : ranks) {
    if (!e.has_recorder) continue;
    for (const auto& r : e.recorder.records)
      if (r.state == CollectiveState::Started && (!oldest || r.started_ns < oldest->started_ns)) oldest = &r;
  }
  for (const auto& e : ranks) {
    if (!e.has_recorder) d.no_data.push_back(e.rank);
    if (e.process_state == 'T' || e.process_state == 't') d.stopped.push_back(e.rank);
  }
  if (!oldest) {
    d.message = "no rank is inside a collective";
    if (!d.stopped.empty()) d.message += str("; ", ranks_word(d.stopped), rank_list(d.stopped), " stopped");
    return d;
  }
  d.found = true;
  d.group = oldest->group;
  d.generation = oldest->generation;
  const bool world = d.group == "world";

  // Each rank's frontier in that group: the newest op it entered. The stalled op is the first one
  // some rank has not finished: its frontier if it is inside it, else the one after.
  struct Frontier {
    int rank;
    const CollectiveRecord* last;  // nullptr: entered none
  };
  std::vector<Frontier> frontiers;
  int64_t seq = -1;
  for (const auto& e : ranks) {
    if (!e.has_recorder) continue;
    const CollectiveRecord* last = last_entered(e.recorder, d.group, d.generation);
    if (!last && !world) continue;  // sub-group membership is unknown without a record
    frontiers.push_back({e.rank, last});
    if (!last) continue;
    const int64_t unfinished = last->state == CollectiveState::Started ? last->seq : last->seq + 1;
    seq = seq < 0 ? unfinished : std::min(seq, unfinished);
  }
  if (seq < 0) seq = oldest->seq;
  d.seq = seq;
  // Its description and how long its first waiter has waited, from whoever is inside it.
  const CollectiveRecord* op = nullptr;
  for (const auto& f : frontiers)
    if (f.last && f.last->seq == seq && (!op || f.last->started_ns < op->started_ns)) op = f.last;
  for (const auto& e : ranks)
    for (const auto& r : e.recorder.records)
      if (!op && r.group == d.group && r.generation == d.generation && r.seq == seq) op = &r;
  if (!op) op = oldest;
  d.op = op->describe();
  d.waited_s = double(now_ns - op->started_ns) * 1e-9;

  std::map<int, std::string> last_seen;  // rank -> what it did last in that group
  std::vector<int> stuck, finished_it;   // inside `seq`; past it
  for (const auto& f : frontiers) {
    if (!f.last) {
      d.missing.push_back(f.rank);
      last_seen[f.rank] = "no collective on " + d.group + " yet";
      continue;
    }
    if (f.last->state == CollectiveState::Started) d.waiting.push_back(f.rank);
    if (f.last->seq < seq) {
      d.missing.push_back(f.rank);
      const int64_t when = f.last->finished_ns ? f.last->finished_ns : f.last->started_ns;
      last_seen[f.rank] = str(f.last->describe(), ", ", collective_state_name(f.last->state), " ",
                              seconds_text(double(now_ns - when) * 1e-9), " ago");
    } else if (f.last->seq == seq && f.last->state == CollectiveState::Started) {
      stuck.push_back(f.rank);
    } else {
      finished_it.push_back(f.rank);
    }
  }
  std::sort(d.waiting.begin(), d.waiting.end());
  std::sort(d.missing.begin(), d.missing.end());

  auto is_stopped = [&](int r) { return std::find(d.stopped.begin(), d.stopped.end(), r) != d.stopped.end(); };
  std::string m = str("collective stalled at ", d.op, " (sequence number ", d.seq, ")");
  if (!d.missing.empty()) {
    std::vector<int> inside;
    for (int r : d.waiting)
      if (std::find(stuck.begin(), stuck.end(), r) != stuck.end()) inside.push_back(r);
    if (!inside.empty())
      m += str(": ", ranks_word(inside), rank_list(inside), " waited ", seconds_text(d.waited_s), " in it");
    m += str("; ", ranks_word(d.missing), rank_list(d.missing), " did not enter it");
    for (int r : d.missing)
      m += str(" (rank ", r, " last: ", last_seen[r], is_stopped(r) ? "; its process is stopped" : "", ")");
  } else if (!finished_it.empty()) {
    m += str(": ", ranks_word(stuck), rank_list(stuck), " are still inside it (", seconds_text(d.waited_s), ") while ",
             ranks_word(finished_it), rank_list(finished_it), " finished it and wait in later collectives");
  } else {
    m += str(": every rank with a record entered it (", seconds_text(d.waited_s), " ago) and none finished it");
  }
  for (int r : d.stopped)
    if (std::find(d.missing.begin(), d.missing.end(), r) == d.missing.end()) m += str("; rank ", r, "'s process is stopped");
  if (!d.no_data.empty())
    m += str("; no flight recorder for ", ranks_word(d.no_data), rank_list(d.no_data),
             " (on another node without a shared run directory, or not started)");
  if (int(ranks.size()) < world_size) m += str("; ", world_size - int(ranks.size()), " rank(s) not looked at");
  d.message = m;
  return d;
}

}  // namespace cadre::obs
