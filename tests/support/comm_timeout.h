// Whether a log says a collective gave up at parallel.comm_timeout. The op that notices first
// words it: Cadre's own deadline ("... failed after 5000 ms timeout") or, for an op already
// handed to Gloo (an asynchronous reduce-scatter in a backward), Gloo's ("Timed out waiting
// 4999ms for recv operation to complete", the time left of the same deadline). Either is the
// timeout firing; which one a run prints depends on where the cut finds it.
#pragma once

#include <regex>
#include <string>

namespace cadre::test {

inline bool names_comm_timeout(const std::string& log, int timeout_ms) {
  if (log.find("failed after " + std::to_string(timeout_ms) + " ms timeout") != std::string::npos) return true;
  const std::regex gloo(R"(Timed out waiting (\d+)ms)");
  for (std::sregex_iterator it(log.begin(), log.end(), gloo), end; it != end; ++it) {
    const int waited = std::stoi((*it)[1]);
    if (waited > timeout_ms - 1000 && waited <= timeout_ms) return true;
  }
  return false;
}

}  // namespace cadre::test
