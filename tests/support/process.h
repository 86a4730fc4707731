// Test helpers for running programs: capture output and exit status, with a deadline.
#pragma once

#include <string>
#include <vector>

namespace cadre::test {

struct RunResult {
  int exit_code = -1;      // -1 when killed by a signal or timed out
  std::string output;      // stdout and stderr interleaved
};

// Runs argv (argv[0] is searched on PATH) with extra environment entries ("K=V"), kills it
// after timeout_s seconds, and returns its exit code and combined output.
RunResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                      double timeout_s = 600);

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes text to a file (creating parent directories).
void write_text(const std::string& path, const std::string& text);

}  // namespace cadre::test
