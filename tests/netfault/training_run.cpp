// The fault tests' training job (see training_run.h).
#include "netfault/training_run.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace cadre::netfault {

std::vector<std::string> train_args(const std::string& cadre_bin, const std::string& source_dir,
                                    const std::string& data_dir, const std::string& run_dir, int steps,
                                    int comm_timeout_s, const TrainShape& shape,
                                    const std::vector<std::string>& extra) {
  std::vector<std::string> a = {cadre_bin, "train", "--config", source_dir + "/configs/tiny.yaml"};
  std::vector<std::string> sets = {
      "parallel.strategy=" + shape.strategy, "train.threads=1", "train.eval_interval=0",
      "train.steps=" + std::to_string(steps), "parallel.comm_timeout=" + std::to_string(comm_timeout_s),
      "checkpoint.interval=" + std::to_string(shape.checkpoint_interval), "checkpoint.keep=100",
      "optim.grad_accum_steps=" + std::to_string(shape.grad_accum_steps), "data.dir=" + data_dir,
      "run.dir=" + run_dir};
  if (shape.memory_interval > 0) sets.push_back("checkpoint.memory_interval=" + std::to_string(shape.memory_interval));
  if (shape.pp_size > 1) sets.push_back("parallel.pp_size=" + std::to_string(shape.pp_size));
  if (shape.tied) sets.push_back("model.tie_embeddings=true");
  sets.insert(sets.end(), extra.begin(), extra.end());
  for (const std::string& s : sets) {
    a.push_back("--set");
    a.push_back(s);
  }
  a.push_back("--resume");
  a.push_back("auto");
  return a;
}

Losses losses_of(const std::string& metrics_path) {
  Losses out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    out[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return out;
}

std::vector<int64_t> steps_logged(const std::string& metrics_path) {
  std::vector<int64_t> out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line).at("step").get<int64_t>());
  return out;
}

}  // namespace cadre::netfault
