// Reading a run's metrics.jsonl and building `cadre train` command lines, for tests that train.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cadre::test {

// The values of `key` in the records of a metrics.jsonl that have it, in step order.
inline std::vector<double> metric_values(const std::string& metrics_jsonl, const char* key = "loss") {
  std::vector<double> out;
  std::ifstream in(metrics_jsonl);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains(key)) out.push_back(record[key].get<double>());
  }
  return out;
}

// argv with a `--set <s>` for each of `sets`.
inline std::vector<std::string> with_sets(std::vector<std::string> argv, const std::vector<std::string>& sets) {
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return argv;
}

}  // namespace cadre::test
