// metrics.jsonl follower (see metrics_watch.h).
#include "netfault/metrics_watch.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace cadre::netfault {

bool MetricsWatch::poll() {
  std::ifstream in(path_);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);  // complete lines only
  auto now = Clock::now();
  std::string fresh;
  if (text.size() >= seen_.size() && text.compare(0, seen_.size(), seen_) == 0) {
    fresh = text.substr(seen_.size());
  } else if (seen_.compare(0, text.size(), text) == 0) {
    new_segment_ = true;  // cut back to a checkpoint's step (resume): nothing new yet
  } else {
    // Rewritten: cut back to a checkpoint and appended to since the last poll (a fast resumed
    // round can do both between two polls), or rewritten from the start by a new round. The
    // lines kept from before are byte for byte what was seen (each record carries its timings,
    // so a rerun's lines differ); what follows them is new.
    size_t kept = 0;
    for (size_t end; (end = text.find('\n', kept)) != std::string::npos; kept = end + 1)
      if (end >= seen_.size() || text.compare(kept, end + 1 - kept, seen_, kept, end + 1 - kept) != 0) break;
    fresh = text.substr(kept);
    new_segment_ = true;
  }
  seen_ = text;
  std::istringstream lines(fresh);
  bool added = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    add(line, now);
    added = true;
  }
  return added;
}

void MetricsWatch::add(const std::string& line, Clock::time_point now) {
  StepRecord r;
  try {
    auto j = nlohmann::json::parse(line);
    r.step = j.at("step").get<int64_t>();
    r.loss = j.at("loss").get<double>();
  } catch (const std::exception& e) {
    throw std::runtime_error(path_ + ": bad metrics record '" + line + "': " + e.what());
  }
  r.seen = now;
  // A step that does not follow the previous one starts a new stretch of training.
  if (segments_.empty() || new_segment_ || r.step <= segments_.back().last_step()) segments_.emplace_back();
  new_segment_ = false;
  segments_.back().steps.push_back(r);
}

}  // namespace cadre::netfault
