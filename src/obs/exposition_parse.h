// Reads Prometheus text exposition back into samples: what `cadre top` does with an agent's
// /metrics, and what tests use to look at a scrape.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cadre::obs {

struct ParsedSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
  std::string label(const std::string& key) const;  // "" when absent
};

// Parses every sample line (comments and blank lines skipped). Throws cadre::Error naming the
// line number and text of a line that is not a sample.
std::vector<ParsedSample> exposition_parse(const std::string& text);

}  // namespace cadre::obs
