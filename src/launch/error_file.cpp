// Root-cause records and the error file (see error_file.h).
#include "launch/error_file.h"


#include <chrono>
#include <ctime>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace cadre::launch {

namespace {

std::string utc_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return stamp;
}

}  // namespace

std::string failure_to_json(const WorkerExit& exit, const std::vector<std::string>& stderr_tail,
                            const FailureContext& c) {
  const std::string stamp = utc_stamp();
  nlohmann::json j{{"rank", exit.global_rank}, {"local_rank", exit.local_rank}, {"pid", exit.pid},
                   {"hostname", c.hostname}, {"group_rank", c.group_rank}, {"round", c.round},
                   {"restart_count", c.restart_count}, {"time", stamp}, {"stderr_tail", stderr_tail},
                   {"reason", exit.describe()}};
  if (std::ifstream in{c.worker_error_file}) {
    // At most 64 KiB of it: a cut may fall inside a UTF-8 sequence, and the worker may have
    // written anything; dump() replaces invalid bytes instead of throwing (below).
    std::string text(65536, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    j["worker_error"] = parsed.is_discarded() ? nlohmann::json(text) : parsed;
  }
  if (exit.signal)
    j["signal"] = exit.signal;
  else
    j["exit_code"] = exit.exit_code;
  return json_dump_lenient(j);
}

std::string stall_failure_to_json(int64_t rank, int64_t local_rank, pid_t pid, const std::string& reason,
                                  const std::string& hang_json, const FailureContext& c) {
  nlohmann::json j{{"rank", rank}, {"local_rank", local_rank}, {"pid", pid}, {"hostname", c.hostname},
                   {"group_rank", c.group_rank}, {"round", c.round}, {"restart_count", c.restart_count},
                   {"time", utc_stamp()}, {"reason", reason}};
  auto hang = nlohmann::json::parse(hang_json, nullptr, /*allow_exceptions=*/false);
  if (!hang_json.empty() && !hang.is_discarded()) j["hang"] = hang;
  return json_dump_lenient(j);
}

int failure_exit_code(const std::string& failure_json) {
  auto j = nlohmann::json::parse(failure_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return 1;
  auto code = j.find("exit_code");
  return code != j.end() && code->is_number_integer() && code->get<int64_t>() == 2 ? 2 : 1;
}

std::string json_dump_lenient(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string failure_summary(const std::string& failure_json) {
  if (failure_json.empty()) return "no worker failure was recorded";
  auto j = nlohmann::json::parse(failure_json, nullptr, /*allow_exceptions=*/false);
  try {
    if (!j.is_object()) throw std::invalid_argument("not a JSON object");
    std::string out = str("root cause: rank ", j.value("rank", -1), " (local rank ", j.value("local_rank", -1), " on ",
                          j.value("hostname", std::string("?")), ", pid ", j.value("pid", 0), ") failed with ",
                          j.value("reason", std::string("?")), " at ", j.value("time", std::string("?")));
    if (j.contains("worker_error"))
      out += "\nthe worker's error file says: " + json_dump_lenient(j["worker_error"]).substr(0, 2000);
    auto tail = j.value("stderr_tail", std::vector<std::string>{});
    if (!tail.empty()) {
      out += "\nlast lines of its stderr:";
      for (const auto& line : tail) out += "\n  " + line;
    }
    return out;
  } catch (const std::exception& e) {
    // Recorded by another agent (or an older version): show it as it is rather than fail.
    return str("the recorded worker failure is not in the expected form (", e.what(), "): ", failure_json.substr(0, 2000));
  }
}

void error_file_write(const std::string& path, const std::string& message, int64_t max_restarts,
                      const std::string& failure_json) {
  nlohmann::json j{{"message", message}, {"max_restarts", max_restarts}};
  auto cause = nlohmann::json::parse(failure_json, nullptr, /*allow_exceptions=*/false);
  j["root_cause"] = failure_json.empty() ? nlohmann::json(nullptr) : cause.is_discarded() ? nlohmann::json(failure_json) : cause;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  // Several agents on one machine may share a log directory: file_write_atomic gives each
  // writer a temporary file of its own.
  file_write_atomic(path, json_dump_lenient(j, 2) + "\n");
}

}  // namespace cadre::launch
