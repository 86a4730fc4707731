// The agent's exit code file (see exit_code_file.h).
#include "launch/exit_code_file.h"

#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "core/file_util.h"

namespace cadre::launch {

std::string exit_code_file_path(const std::string& pattern, int64_t node_rank, const GetEnv& getenv) {
  std::string node;
  if (const char* id = getenv("SLURM_NODEID"); id && *id) {
    node = id;
  } else if (node_rank >= 0) {
    node = std::to_string(node_rank);
  } else {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    node = host;
  }
  std::string path = pattern;
  for (size_t at = path.find("%n"); at != std::string::npos; at = path.find("%n", at + node.size()))
    path.replace(at, 2, node);
  return path;
}

void exit_code_file_write(const std::string& path, int code) {
  try {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    file_write_atomic(path, std::to_string(code) + "\n");
  } catch (const std::exception& e) {
    throw Error(str("--exit-code-file ", path, ": cannot write the exit code ", code, ": ", e.what()));
  }
}

}  // namespace cadre::launch
