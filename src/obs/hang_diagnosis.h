// Which rank a stalled job waits for: from every rank's flight recorder (read from the shared
// ring or from its dump), take the group of the op some rank has been inside the longest, and
// in it the first op not every rank has finished (each rank's newest op is its frontier). Name
// the ranks that never entered that op, with what each did last, or, when every rank entered
// it, those still inside it while others finished it. Processes the agent can see also tell
// whether they are stopped (SIGSTOP, a debugger).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "obs/flight_recorder.h"

namespace cadre::obs {

struct RankEvidence {
  int rank = 0;
  bool has_recorder = false;
  FlightRecorderState recorder;
  std::string source;         // "shared ring" | "dump <path>"
  char process_state = 0;     // from /proc when the process is local (0: unknown)
};

struct HangDiagnosis {
  bool found = false;         // some rank is inside a collective
  std::string group;
  int generation = 0;
  int64_t seq = -1;
  std::string op;             // CollectiveRecord::describe() of the stalled op
  double waited_s = 0;        // how long the earliest waiter has been in it
  std::vector<int> waiting;   // ranks inside a collective of that group (it, or a later one)
  std::vector<int> missing;   // ranks that did not enter it
  std::vector<int> no_data;   // ranks with no recorder to look at
  std::vector<int> stopped;   // ranks whose process is stopped (SIGSTOP, debugger)
  std::string message;        // one paragraph for the log and the error file
  nlohmann::json to_json() const;
};

// `now_ns` on the wall clock (flight-recorder times are wall clock too).
HangDiagnosis hang_diagnose(const std::vector<RankEvidence>& ranks, int world_size, int64_t now_ns);

}  // namespace cadre::obs
