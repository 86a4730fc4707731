// Test helper: runs N copies of a command as ranks of one job on loopback (RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and CADRE_JOB_SECRET set; a free port), captures
// each rank's output, and kills and reaps every child when the run ends or the test fails.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cadre::testing {

// A port nobody listens on right now: bind port 0 and read back what the kernel chose.
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("bind failed");
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

struct RankResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;  // stdout and stderr interleaved
};

// Kills (SIGKILL) and reaps whatever is still running when it goes out of scope.
class ChildGuard {
 public:
  ~ChildGuard() {
    for (pid_t p : pids)
      if (p > 0) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
  }
  std::vector<pid_t> pids;
};

inline pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execvpe(args[0], args.data(), envp.data());
    _exit(127);
  }
  return pid;
}

// Every variable of this process's environment except the job's, plus `extra`.
inline std::vector<std::string> base_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    for (const char* job : {"RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=", "LOCAL_RANK=", "MASTER_ADDR=", "MASTER_PORT=",
                            "CADRE_JOB_SECRET=", "CADRE_JOB_SECRET_FILE=", "CADRE_JOB_SECRET_FD="})
      if (kv.rfind(job, 0) == 0) kv.clear();
    if (!kv.empty()) env.push_back(kv);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// The variables that make a process rank `rank` of `world` ranks on loopback, meeting at `port`
// with the job secret `secret` (store/secret.h).
inline std::vector<std::string> rank_environment(int rank, int world, int port, const std::string& secret) {
  return {"RANK=" + std::to_string(rank),       "LOCAL_RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(world), "LOCAL_WORLD_SIZE=" + std::to_string(world),
          "MASTER_ADDR=127.0.0.1",              "MASTER_PORT=" + std::to_string(port),
          "CADRE_JOB_SECRET=" + secret};
}

struct RankOptions {
  // Prepended to the command of one rank (e.g. {"taskset", "-c", "1"}); empty for none.
  std::function<std::vector<std::string>(int rank)> prefix;
  // Extra KEY=VALUE for one rank (replacing the harness's own value of KEY).
  std::function<std::vector<std::string>(int rank)> env;
  std::chrono::seconds limit{180};
};

// Runs `argv` as ranks 0..n-1 and waits for all; a run past `limit` is killed and reported.
inline std::vector<RankResult> run_ranks(int n, const std::vector<std::string>& argv, const RankOptions& options = {}) {
  const int port = free_port();
  // Ranks launched by hand share a job secret through the environment (store/secret.h).
  const std::string secret = "rank-processes-" + std::to_string(getpid()) + "-" + std::to_string(port);
  ChildGuard guard;
  std::vector<std::string> logs;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> extra = rank_environment(r, n, port, secret);
    if (options.env)
      for (auto& e : options.env(r)) {  // replaces a variable of the same name
        const std::string name = e.substr(0, e.find('=') + 1);
        extra.erase(std::remove_if(extra.begin(), extra.end(), [&](const std::string& x) { return x.rfind(name, 0) == 0; }),
                    extra.end());
        extra.push_back(e);
      }
    std::vector<std::string> command;
    if (options.prefix) command = options.prefix(r);
    command.insert(command.end(), argv.begin(), argv.end());
    logs.push_back("/tmp/cadre_test_" + std::to_string(getpid()) + "_" + std::to_string(port) + "_rank" + std::to_string(r) + ".log");
    guard.pids.push_back(spawn(command, base_environment(extra), logs.back()));
  }
  std::vector<RankResult> results(n);
  const auto deadline = std::chrono::steady_clock::now() + options.limit;
  int running = n;
  bool timed_out = false;
  while (running > 0) {
    for (int r = 0; r < n; ++r) {
      if (guard.pids[r] <= 0) continue;
      int status = 0;
      if (waitpid(guard.pids[r], &status, WNOHANG) == guard.pids[r]) {
        results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        guard.pids[r] = 0;
        --running;
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      break;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, not timing
  }
  for (int r = 0; r < n; ++r) {
    std::ifstream in(logs[r]);
    std::stringstream ss;
    ss << in.rdbuf();
    results[r].output = ss.str();
    if (timed_out && guard.pids[r] > 0) results[r].output += "\n[test harness: rank still running at the time limit, killed]";
    std::remove(logs[r].c_str());
  }
  return results;
}

// Runs independent commands (no job: the harness's own environment), at most `parallel` at a
// time, each started as soon as one ends; waits for all. A command past `limit` is killed and
// reported (exit 128 + 9). For one-rank runs of one thread each: the machine's cores, not one.
inline std::vector<RankResult> run_each(const std::vector<std::vector<std::string>>& commands, int parallel,
                                        std::chrono::seconds limit = std::chrono::seconds{600}) {
  const std::string tag = "/tmp/cadre_test_" + std::to_string(getpid()) + "_each";
  std::vector<RankResult> results(commands.size());
  std::vector<std::chrono::steady_clock::time_point> started(commands.size());
  ChildGuard guard;
  guard.pids.assign(commands.size(), 0);
  size_t next = 0, done = 0;
  int running = 0;
  auto log = [&](size_t i) { return tag + std::to_string(i) + ".log"; };
  while (done < commands.size()) {
    for (; running < std::max(parallel, 1) && next < commands.size(); ++next, ++running) {
      started[next] = std::chrono::steady_clock::now();
      guard.pids[next] = spawn(commands[next], base_environment({}), log(next));
    }
    for (size_t i = 0; i < next; ++i) {
      if (guard.pids[i] <= 0) continue;
      int status = 0;
      const bool late = std::chrono::steady_clock::now() - started[i] > limit;
      if (late) kill(guard.pids[i], SIGKILL);
      if (waitpid(guard.pids[i], &status, late ? 0 : WNOHANG) != guard.pids[i]) continue;
      results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::ifstream in(log(i));
      std::stringstream ss;
      ss << in.rdbuf();
      results[i].output = ss.str() + (late ? "\n[test harness: still running at the time limit, killed]" : "");
      std::remove(log(i).c_str());
      guard.pids[i] = 0;
      --running;
      ++done;
    }
    if (done < commands.size()) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, not timing
  }
  return results;
}

inline std::string describe(const std::vector<RankResult>& results) {
  std::string s;
  for (size_t r = 0; r < results.size(); ++r)
    s += "--- rank " + std::to_string(r) + " exit " + std::to_string(results[r].exit_code) + "\n" + results[r].output + "\n";
  return s;
}

}  // namespace cadre::testing
