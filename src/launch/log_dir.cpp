// Temporary log directories of `cadre run` and their rotation (see log_dir.h).
#include "core/file_util.h"
#include "launch/log_dir.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace fs = std::filesystem;

namespace cadre::launch {
namespace {

constexpr const char* kPrefix = "cadre-run-";
constexpr const char* kPidFile = "agent.pid";

// True when the directory's agent may still be using it (alive, or the owner is unknown and
// the directory is younger than a day).
bool in_use(const fs::path& dir) {
  std::ifstream in(dir / kPidFile);
  long pid = 0;
  if (in >> pid && pid > 0) return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
  std::error_code ec;
  auto age = fs::file_time_type::clock::now() - fs::last_write_time(dir, ec);
  return !ec && age < std::chrono::hours(24);
}

}  // namespace

std::string temp_log_dir_create(size_t keep) {
  const fs::path tmp = fs::temp_directory_path();
  std::vector<std::pair<fs::file_time_type, fs::path>> old;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !e.is_directory(ec) || in_use(e.path())) continue;
    old.emplace_back(fs::last_write_time(e.path(), ec), e.path());
  }
  std::sort(old.begin(), old.end(), [](const auto& a, const auto& b) { return a.first > b.first; });  // newest first
  const size_t stay = keep > 0 ? keep - 1 : 0;
  for (size_t i = stay; i < old.size(); ++i) {
    remove_tree(old[i].second, ec);
    if (ec) log::warn(str("cannot remove old log directory ", old[i].second.string(), ": ", ec.message()));
  }
  std::string tmpl = (tmp / (std::string(kPrefix) + "XXXXXX")).string();
  CADRE_CHECK(::mkdtemp(tmpl.data()), "cannot create a temporary log directory ", tmpl, ": ", std::strerror(errno));
  std::ofstream(fs::path(tmpl) / kPidFile) << ::getpid() << "\n";
  return tmpl;
}

void temp_log_dir_remove(const std::string& dir) {
  std::error_code ec;
  remove_tree(dir, ec);
  if (ec) log::warn(str("cannot remove the log directory ", dir, ": ", ec.message()));
}

}  // namespace cadre::launch
