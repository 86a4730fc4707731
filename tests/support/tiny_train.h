// The `cadre train` command line of the tests that train the tiny Llama (configs/tiny.yaml)
// on a prepared dataset: one thread per rank, no validation, and the caller's overrides.
#pragma once

#include <string>
#include <vector>

namespace cadre::test {

// `sets` are "key=value" overrides, each passed as --set.
inline std::vector<std::string> tiny_train_command(const std::string& data_dir, const std::string& run_dir,
                                                   const std::vector<std::string>& sets) {
  std::vector<std::string> argv = {CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                   "--set", "data.dir=" + data_dir, "--set", "run.dir=" + run_dir,
                                   "--set", "train.threads=1", "--set", "train.eval_interval=0"};
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return argv;
}

}  // namespace cadre::test
