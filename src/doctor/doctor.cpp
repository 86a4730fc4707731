// Runs the doctor's checks on every rank, gathers them on rank 0 and reports them as text or
// JSON; the exit code and the last line name each failing check and its rank.
#include "doctor/doctor.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"

namespace cadre::doctor {
namespace {

nlohmann::json to_json(const CheckResult& c) {
  return {{"name", c.name}, {"rank", c.rank}, {"ok", c.ok}, {"value", c.value},
          {"limit", c.limit}, {"unit", c.unit}, {"detail", c.detail}, {"gpu", c.gpu}};
}

CheckResult from_json(const nlohmann::json& j) {
  CheckResult c;
  c.name = j.at("name");
  c.rank = j.at("rank");
  c.ok = j.at("ok");
  c.value = j.at("value");
  c.limit = j.at("limit");
  c.unit = j.at("unit");
  c.detail = j.at("detail");
  c.gpu = j.at("gpu");
  return c;
}

// Every rank's string, in rank order (strings of different lengths travel as padded int64).
std::vector<std::string> all_gather_strings(comm::Communicator& comm, const std::string& mine) {
  const int n = comm.size();
  at::Tensor lengths = at::zeros({n}, at::kLong);
  comm.all_gather(lengths, at::full({1}, int64_t(mine.size()), at::kLong));
  const int64_t longest = lengths.max().item<int64_t>(), words = (longest + 7) / 8;
  at::Tensor packed = at::zeros({words}, at::kLong);
  std::memcpy(packed.data_ptr(), mine.data(), mine.size());
  at::Tensor all = at::zeros({n * words}, at::kLong);
  comm.all_gather(all, packed);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data_ptr<int64_t>() + r * words), lengths[r].item<int64_t>());
  return out;
}

int threads_per_rank(int world_size) {
  int local = world_size;
  if (const char* l = std::getenv("LOCAL_WORLD_SIZE"); l && *l) local = std::max(1, std::atoi(l));
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local));
}

std::string format_value(const CheckResult& c) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g %s", c.value, c.unit.c_str());
  return buf;
}

void print_human(const std::vector<CheckResult>& checks, int world_size, const std::string& verdict) {
  std::printf("cadre doctor: %d rank(s)\n", world_size);
  for (const auto& c : checks) {
    std::string who = c.rank < 0 ? "all" : str("rank ", c.rank);
    std::string limit = c.limit != 0 ? str(c.name == "allreduce_latency" || c.name == "straggler" ? " (max " : " (min ", c.limit, ")") : "";
    std::printf("  %-4s  %-22s %-8s %-18s%-14s %s\n", c.ok ? "ok" : "FAIL", c.name.c_str(), who.c_str(),
                c.unit.empty() ? "" : format_value(c).c_str(), limit.c_str(), c.detail.c_str());
  }
  std::printf("%s\n", verdict.c_str());
  std::fflush(stdout);
}

// This rank's GPU checks; an error from the GPU itself (a CUDA error, a lost device) is reported
// as a failed check naming the GPU, so the report still comes.
std::vector<CheckResult> gpu_checks(const c10::Device& device, const DoctorOptions& o) {
  try {
    return check_gpu(device, o);
  } catch (const std::exception& e) {
    CheckResult failed("gpu_visible");
    failed.ok = false;
    failed.gpu = str("GPU ", int(device.index()));
    failed.detail = e.what();
    return {failed};
  }
}

std::string gpu_of(const std::vector<CheckResult>& checks) {
  for (const auto& c : checks)
    if (!c.gpu.empty()) return c.gpu;
  return "";
}

}  // namespace

int run_doctor(const DoctorOptions& o) {
  const c10::Device device = device_select(o.device, "--device");  // before any work: a bad --device exits 2
  const comm::JobEnv env = comm::JobEnv::from_env();
  comm::CommOptions comm_options;
  comm_options.timeout = std::chrono::seconds(o.timeout_s);
  comm::Communicator comm(env, comm_options);
  const int threads = threads_per_rank(env.world_size);

  std::vector<CheckResult> local{check_tensor_sanity(), check_fp32_matmul(o, threads), check_bf16_matmul(o, threads),
                                 check_memory(o)};
  if (device.is_cuda())
    for (auto& c : gpu_checks(device, o)) local.push_back(c);
  const std::string gpu = gpu_of(local);
  std::vector<CheckResult> global;
  bool comm_ok = true;
  try {
    for (auto& c : check_collectives(comm)) local.push_back(c);
    if (device.is_cuda()) local.push_back(check_all_reduce_on(comm, device, gpu));
    global.push_back(check_bandwidth(comm, o));
    global.push_back(check_latency(comm, o));
    global.push_back(check_straggler(comm, o));
  } catch (const std::exception& e) {
    comm_ok = false;
    CheckResult failed("collectives");
    failed.ok = false;
    failed.detail = e.what();
    failed.gpu = gpu;
    local.push_back(failed);
  }
  for (auto& c : local) c.rank = env.rank;

  std::vector<CheckResult> all;
  if (comm_ok) {
    nlohmann::json mine = nlohmann::json::array();
    for (const auto& c : local) mine.push_back(to_json(c));
    for (const auto& text : all_gather_strings(comm, mine.dump()))
      for (const auto& j : nlohmann::json::parse(text)) all.push_back(from_json(j));
    all.insert(all.end(), global.begin(), global.end());
  } else {
    all = local;  // no peers to gather from: every rank reports its own view
  }

  std::vector<std::string> failing;
  for (const auto& c : all)
    if (!c.ok) failing.push_back(failure_name(c));
  std::string verdict = "doctor: all checks passed";
  if (!failing.empty()) {
    verdict = "doctor: FAILED:";
    for (size_t i = 0; i < failing.size(); ++i) verdict += (i ? ", " : " ") + failing[i];
  }
  if (env.rank == 0 || !comm_ok) {
    if (o.json) {
      nlohmann::json report = {{"ok", failing.empty()}, {"world_size", env.world_size}, {"failed", failing}};
      report["checks"] = nlohmann::json::array();
      for (const auto& c : all) report["checks"].push_back(to_json(c));
      std::printf("%s\n", report.dump(2).c_str());
      std::fflush(stdout);
    } else {
      print_human(all, env.world_size, verdict);
    }
  }
  if (!failing.empty()) log::error(verdict);
  return failing.empty() ? 0 : 1;
}

}  // namespace cadre::doctor
