// JSON form of a worker's report (see worker_report.h).
#include "obs/worker_report.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cadre::obs {
namespace {

nlohmann::json split_json(const StepSplit& s) {
  return {s.total_s, s.compute_s, s.comm_wait_s, s.data_wait_s};
}
StepSplit split_from(const nlohmann::json& j) {
  StepSplit s;
  if (!j.is_array() || j.size() != 4) throw Error("expected [total, compute, comm_wait, data_wait]");
  s.total_s = j[0];
  s.compute_s = j[1];
  s.comm_wait_s = j[2];
  s.data_wait_s = j[3];
  return s;
}

}  // namespace

std::string WorkerReport::to_json() const {
  nlohmann::json j = {{"rank", rank},
                      {"local_rank", local_rank},
                      {"world_size", world_size},
                      {"pid", pid},
                      {"run_dir", run_dir},
                      {"dumps_on_sigusr1", dumps_on_sigusr1},
                      {"step", step},
                      {"last", split_json(last)},
                      {"totals", split_json(totals)},
                      {"steps_total", steps_total},
                      {"unit", unit},
                      {"units_total", units_total},
                      {"units_per_s", units_per_s},
                      {"samples_total", samples_total},
                      {"samples_per_s", samples_per_s},
                      {"loss", loss},
                      {"grad_norm", grad_norm},
                      {"lr", lr},
                      {"model_state_bytes", model_state_bytes},
                      {"saves_total", saves_total},
                      {"save_bytes_total", save_bytes_total},
                      {"save_s", save_s},
                      {"save_blocked_s", save_blocked_s},
                      {"resumed", resumed},
                      {"load_s", load_s},
                      {"load_bytes", load_bytes},
                      {"straggler_tracking", straggler_tracking},
                      {"straggling", straggling},
                      {"straggler_ratio", straggler_ratio},
                      {"straggler_cause", straggler_cause}};
  if (has_val_loss) j["val_loss"] = val_loss;
  return j.dump();
}

WorkerReport WorkerReport::from_json(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw Error(str("worker report is not a JSON object: '", text.substr(0, 200), "'"));
  WorkerReport r;
  try {
    r.rank = j.at("rank");
    r.local_rank = j.at("local_rank");
    r.world_size = j.at("world_size");
    r.pid = j.at("pid");
    r.run_dir = j.at("run_dir");
    r.dumps_on_sigusr1 = j.at("dumps_on_sigusr1");
    r.step = j.at("step");
    r.last = split_from(j.at("last"));
    r.totals = split_from(j.at("totals"));
    r.steps_total = j.at("steps_total");
    r.unit = j.at("unit");
    r.units_total = j.at("units_total");
    r.units_per_s = j.at("units_per_s");
    r.samples_total = j.at("samples_total");
    r.samples_per_s = j.at("samples_per_s");
    r.loss = j.at("loss");
    r.grad_norm = j.at("grad_norm");
    r.lr = j.at("lr");
    r.model_state_bytes = j.at("model_state_bytes");
    r.saves_total = j.at("saves_total");
    r.save_bytes_total = j.at("save_bytes_total");
    r.save_s = j.at("save_s");
    r.save_blocked_s = j.at("save_blocked_s");
    r.resumed = j.at("resumed");
    r.load_s = j.at("load_s");
    r.load_bytes = j.at("load_bytes");
    r.straggler_tracking = j.at("straggler_tracking");
    r.straggling = j.at("straggling");
    r.straggler_ratio = j.at("straggler_ratio");
    r.straggler_cause = j.at("straggler_cause");
    if (j.contains("val_loss")) {
      r.has_val_loss = true;
      r.val_loss = j["val_loss"];
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("worker report: ", e.what()));
  }
  return r;
}

}  // namespace cadre::obs
