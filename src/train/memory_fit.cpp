// memory_cgroup_limit, FitCheck and require_fit (memory_fit.h).
#include "train/memory_fit.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "core/byte_size.h"
#include "core/error.h"

namespace cadre {
namespace {

// The process's memory cgroup as (mount, path below it): v1's "N:memory:/path" line or v2's
// "0::/path". In a container with its own cgroup namespace the path is "/" and the mount's top
// is the container's own cgroup.
std::pair<std::string, std::string> own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::pair<std::string, std::string> v2;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::stringstream list(controllers);
    for (std::string name; std::getline(list, name, ',');)
      if (name == "memory") return {"/sys/fs/cgroup/memory", path};
    if (controllers.empty()) v2 = {"/sys/fs/cgroup", path};
  }
  return v2;
}

// A limit file's value: bytes, or -1 for "max" (v2), v1's "no limit" (a page-rounded
// LONG_MAX) and a missing file.
int64_t read_limit(const std::string& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    const long long value = std::stoll(text);
    return value >= (1LL << 62) ? -1 : value;
  } catch (const std::exception&) {
    throw Error(str(file, ": '", text, "' is not a memory limit"));
  }
}

}  // namespace

CgroupLimit memory_cgroup_limit() {
  const auto [mount, own] = own_cgroup();
  CgroupLimit best;
  if (mount.empty()) return best;
  // A parent's limit binds its children too: the tightest from the process's cgroup up to the top.
  std::string path = own;
  while (true) {
    const std::string dir = path == "/" || path.empty() ? mount : mount + path;
    for (const char* name : {"/memory.limit_in_bytes", "/memory.max"}) {
      const int64_t bytes = read_limit(dir + name);
      if (bytes >= 0 && (best.bytes < 0 || bytes < best.bytes)) best = {bytes, dir + name};
    }
    if (dir == mount) break;
    path.resize(path.rfind('/'));
  }
  return best;
}

int64_t FitCheck::headroom() const {
  const int64_t need = baseline + estimate.total();
  int64_t room = std::numeric_limits<int64_t>::max();
  if (config_limit >= 0) room = std::min(room, config_limit - need);
  if (cgroup.bytes >= 0) room = std::min(room, cgroup.bytes - int64_t(cgroup_ranks) * need);
  return room;
}

std::string FitCheck::to_text() const {
  std::string text = "estimated per rank: " + estimate.to_text() + ", beside the process's own " +
                     format_bytes(baseline) + " (RssAnon) before the model";
  const int64_t need = baseline + estimate.total();
  if (config_limit >= 0)
    text += "; train.memory_limit " + format_bytes(config_limit) + " per rank must hold " + format_bytes(need);
  if (cgroup.bytes >= 0)
    text += "; the memory cgroup's limit " + format_bytes(cgroup.bytes) + " (" + cgroup.file + ") must hold " +
            std::to_string(cgroup_ranks) + " rank" + (cgroup_ranks > 1 ? "s" : "") + " of this job: " +
            format_bytes(int64_t(cgroup_ranks) * need);
  return text;
}

void require_fit(const FitCheck& check, int rank) {
  CADRE_CONFIG_CHECK(check.headroom() >= 0, "rank ", rank, " would not fit its memory: ", check.to_text(),
                     ". Shard over more ranks, lower data.batch_size, turn on parallel.activation_checkpointing or "
                     "bfloat16 (parallel.mixed_precision.param_dtype), or raise the limit");
}

}  // namespace cadre
