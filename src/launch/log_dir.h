// Where `cadre run` keeps per-rank logs and the error file when --log-dir is not given: under
// the run directory of a `cadre train` program, else a temporary directory. Temporary ones
// are removed after a successful job (the console had every line) and kept after a failure
// (they hold error.json); only the newest few of those stay, so /tmp does not fill up.
#pragma once

#include <cstddef>
#include <string>

namespace cadre::launch {

// Creates <temp>/cadre-run-XXXXXX (owned by this agent: its pid goes into agent.pid), first
// removing older cadre-run-* directories of agents that are gone so that at most `keep`
// remain, this one included. Directories of live agents are never touched.
std::string temp_log_dir_create(size_t keep = 10);

// Removes a directory temp_log_dir_create made (after a successful job).
void temp_log_dir_remove(const std::string& dir);

}  // namespace cadre::launch
