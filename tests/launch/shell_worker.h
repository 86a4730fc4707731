// The shell worker the launcher tests run under `cadre run`: it records the torchrun environment
// it got in DIR/start.<restart>.<world>.<rank>.<pid>, then behaves per MODE (ok, crash_once,
// always, wait, wait_child). Plus readers of those records. Shared by run_test.cpp and
// etcd_run_test.cpp.
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launch/launch_harness.h"

namespace launch_test {

// The worker: records its environment in DIR/start.<restart>.<world>.<rank>.<pid>, prints a line
// on stdout and stderr, then behaves according to MODE. MARKER only tags its command line.
inline const char* kWorkerScript = R"SH(#!/bin/sh
marker=$1; dir=$2; mode=$3
f="$dir/start.$TORCHELASTIC_RESTART_COUNT.$WORLD_SIZE.$RANK.$$"
env | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_RANK|ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_[A-Z_]*)=' > "$f.tmp"
mv "$f.tmp" "$f"
echo "out from rank $RANK"
echo "err from rank $RANK" >&2
wait_finish() { while [ ! -f "$dir/finish" ]; do sleep 0.05; done; }
# A crashing rank first waits until every rank of its round has recorded its start, so the
# test's "all ranks started in round k" does not race against the group being stopped.
wait_round_started() {
  while [ "$(ls "$dir" | grep "^start\.$TORCHELASTIC_RESTART_COUNT\.$WORLD_SIZE\." | grep -vc 'tmp$')" -lt "$WORLD_SIZE" ]; do
    sleep 0.05
  done
}
case $mode in
  ok) ;;
  crash_once)
    if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
      wait_round_started; echo "rank 1 crashes on purpose" >&2; exit 3
    fi ;;
  always)
    if [ "$RANK" = 0 ]; then
      wait_round_started
      echo '{"message": "rank 0 raised ValueError"}' > "$TORCHELASTIC_ERROR_FILE"
      echo "fatal: rank 0 cannot continue" >&2; exit 7
    fi
    wait_finish ;;
  wait) wait_finish ;;
  wait_child)
    trap 'echo "$mode" > "$dir/got_signal.$RANK"; exit 0' TERM INT
    /bin/sh -c 'while :; do sleep 0.2; done' "$marker-grandchild" &
    wait_finish ;;
esac
)SH";

struct Start {
  int restart = 0, world = 0, rank = 0;
  std::map<std::string, std::string> env;
};

// Every recorded worker start in dir.
inline std::vector<Start> worker_starts(const std::string& dir) {
  std::vector<Start> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind("start.", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
    Start s;
    std::sscanf(name.c_str(), "start.%d.%d.%d.", &s.restart, &s.world, &s.rank);
    std::istringstream lines(read_file(e.path().string()));
    for (std::string line; std::getline(lines, line);) {
      auto eq = line.find('=');
      if (eq != std::string::npos) s.env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    out.push_back(s);
  }
  return out;
}

// Ranks that started with this world size (and restart count, if >= 0).
inline std::set<int> worker_ranks_started(const std::string& dir, int world, int restart = -1) {
  std::set<int> ranks;
  for (const auto& s : worker_starts(dir))
    if (s.world == world && (restart < 0 || s.restart == restart)) ranks.insert(s.rank);
  return ranks;
}

inline std::set<int> worker_all_ranks(int n) {
  std::set<int> r;
  for (int i = 0; i < n; ++i) r.insert(i);
  return r;
}

}  // namespace launch_test
