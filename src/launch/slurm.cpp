// Slurm host list / count parsing and the srun environment (see slurm.h).
#include "launch/slurm.h"

#include <netdb.h>

#include <cctype>
#include <cstdio>
#include <memory>

#include "core/error.h"

namespace cadre::launch {
namespace {

int64_t parse_count(const std::string& text, const std::string& context) {
  size_t used = 0;
  int64_t v = -1;
  try { v = std::stoll(text, &used); } catch (const std::exception&) { used = 0; }
  CADRE_CONFIG_CHECK(used == text.size() && !text.empty() && v >= 0, "slurm: bad number '", text, "' in '", context, "'");
  return v;
}

// Splits on commas that are not inside brackets.
std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    CADRE_CONFIG_CHECK(depth >= 0 && depth <= 1, "slurm: unbalanced brackets in host list '", text, "'");
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  CADRE_CONFIG_CHECK(depth == 0, "slurm: unbalanced brackets in host list '", text, "'");
  parts.push_back(cur);
  return parts;
}

// Expands one host pattern with any number of bracket groups ("r[1-2]n[3,5]").
void expand_pattern(const std::string& pattern, const std::string& whole, std::vector<std::string>& out) {
  auto open = pattern.find('[');
  if (open == std::string::npos) {
    CADRE_CONFIG_CHECK(!pattern.empty() && pattern.find(']') == std::string::npos, "slurm: bad host list '", whole, "'");
    out.push_back(pattern);
    return;
  }
  auto close = pattern.find(']', open);
  CADRE_CONFIG_CHECK(close != std::string::npos, "slurm: unbalanced brackets in host list '", whole, "'");
  std::string prefix = pattern.substr(0, open), body = pattern.substr(open + 1, close - open - 1),
              rest = pattern.substr(close + 1);
  CADRE_CONFIG_CHECK(!body.empty(), "slurm: empty brackets in host list '", whole, "'");
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string range = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? body.size() + 1 : comma + 1;
    auto dash = range.find('-');
    std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    int64_t a = parse_count(lo, whole), b = parse_count(hi, whole);
    CADRE_CONFIG_CHECK(a <= b, "slurm: descending range '", range, "' in host list '", whole, "'");
    size_t width = lo.size();  // "01-10": keep the zero padding of the lower bound
    for (int64_t i = a; i <= b; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      expand_pattern(prefix + n + rest, whole, out);
    }
  }
}

}  // namespace

std::vector<std::string> slurm_hostlist_expand(const std::string& hostlist) {
  std::vector<std::string> hosts;
  CADRE_CONFIG_CHECK(!hostlist.empty(), "slurm: empty host list");
  for (const auto& part : split_top_level(hostlist)) expand_pattern(part, hostlist, hosts);
  return hosts;
}

std::vector<int64_t> slurm_counts_expand(const std::string& counts) {
  std::vector<int64_t> out;
  CADRE_CONFIG_CHECK(!counts.empty(), "slurm: empty count list");
  size_t start = 0;
  while (start <= counts.size()) {
    size_t comma = counts.find(',', start);
    std::string item = counts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? counts.size() + 1 : comma + 1;
    int64_t repeat = 1;
    if (auto paren = item.find("(x"); paren != std::string::npos) {
      CADRE_CONFIG_CHECK(item.back() == ')', "slurm: bad count '", item, "' in '", counts, "'");
      repeat = parse_count(item.substr(paren + 2, item.size() - paren - 3), counts);
      item = item.substr(0, paren);
    }
    int64_t value = parse_count(item, counts);
    for (int64_t i = 0; i < repeat; ++i) out.push_back(value);
  }
  return out;
}

std::optional<SlurmLaunch> slurm_launch_from_env(const GetEnv& getenv) {
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? v : "";
  };
  // Only inside an srun step (SLURM_STEP_ID); a batch script itself is not a launch.
  if (get("SLURM_JOB_ID").empty() || get("SLURM_STEP_ID").empty()) return std::nullopt;
  SlurmLaunch s;
  s.job_id = get("SLURM_JOB_ID");
  std::string nodelist = get("SLURM_STEP_NODELIST");
  if (nodelist.empty()) nodelist = get("SLURM_JOB_NODELIST");
  if (nodelist.empty()) nodelist = get("SLURM_NODELIST");
  CADRE_CONFIG_CHECK(!nodelist.empty(), "slurm: SLURM_STEP_NODELIST / SLURM_JOB_NODELIST is not set");
  auto hosts = slurm_hostlist_expand(nodelist);
  s.first_host = hosts.front();
  s.nnodes = static_cast<int64_t>(hosts.size());
  std::string node_id = get("SLURM_NODEID");
  CADRE_CONFIG_CHECK(!node_id.empty(), "slurm: SLURM_NODEID is not set");
  s.node_rank = parse_count(node_id, "SLURM_NODEID");
  CADRE_CONFIG_CHECK(s.node_rank < s.nnodes, "slurm: SLURM_NODEID ", s.node_rank, " is outside the ", s.nnodes,
                     " nodes of '", nodelist, "'");
  try {
    s.port = static_cast<uint16_t>(29500 + std::stoll(s.job_id) % 1000);
  } catch (const std::exception&) {
    s.port = 29500;  // non-numeric job id (array/het job syntax): the torchrun default
  }
  std::string tasks = get("SLURM_STEP_TASKS_PER_NODE");
  if (tasks.empty()) tasks = get("SLURM_TASKS_PER_NODE");
  if (!tasks.empty()) {
    auto per_node = slurm_counts_expand(tasks);
    if (s.node_rank < static_cast<int64_t>(per_node.size())) s.tasks_on_this_node = per_node[s.node_rank];
  }
  return s;
}

std::string slurm_node_address(const std::string& node) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(node.c_str(), nullptr, &hints, &found) == 0) {
    ::freeaddrinfo(found);
    return node;
  }
  // Node names must be plain host names here: they go into a shell command.
  for (char c : node)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return node;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(("scontrol show node " + node + " -o 2>/dev/null").c_str(), "r"),
                                             ::pclose);
  if (!pipe) return node;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  auto at = out.find("NodeAddr=");
  if (at == std::string::npos) return node;
  at += 9;
  return out.substr(at, out.find_first_of(" \n", at) - at);
}

}  // namespace cadre::launch
