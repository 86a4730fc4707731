// The paper run of a pipeline schedule (simulation.h).
#include "pipeline/simulation.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace cadre::pipeline {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::infinity();

// When each (kind, micro, virtual stage) finished; kNotYet until it has run.
class Finishes {
 public:
  explicit Finishes(const PipelineShape& s) : virtual_stages_(s.virtual_stages()), micro_(s.micro_batches) {
    at_.assign(size_t(2 * virtual_stages_ * micro_), kNotYet);
  }
  double& at(Action::Kind kind, int64_t micro, int64_t g) {
    return at_[size_t((int64_t(kind) * virtual_stages_ + g) * micro_ + micro)];
  }

 private:
  int64_t virtual_stages_, micro_;
  std::vector<double> at_;
};

// The action `a` (on `stage`) waits for, and when it finished (kNotYet: not yet run; -1: none).
std::pair<std::string, double> dependency(Finishes& done, const PipelineShape& s, int64_t stage, const Action& a) {
  const int64_t g = a.chunk * s.stages + stage, last = s.virtual_stages() - 1;
  auto name = [&](Action::Kind kind, int64_t vg) {
    return str("stage ", vg % s.stages, " ", describe({kind, a.micro, vg / s.stages}));
  };
  if (a.kind == Action::Forward) {
    if (g == 0) return {"", -1};
    return {name(Action::Forward, g - 1), done.at(Action::Forward, a.micro, g - 1)};
  }
  const double own = done.at(Action::Forward, a.micro, g);
  if (own == kNotYet) return {name(Action::Forward, g), kNotYet};
  if (g == last) return {"", own};
  return {name(Action::Backward, g + 1), std::max(own, done.at(Action::Backward, a.micro, g + 1))};
}

}  // namespace

Simulation simulate_orders(const std::vector<std::vector<Action>>& orders, const PipelineShape& s, double forward_cost,
                           double backward_cost) {
  CADRE_CHECK(int64_t(orders.size()) == s.stages, "pipeline simulation: ", orders.size(), " orders for ", s.stages,
              " stages");
  Finishes done(s);
  std::vector<size_t> next(orders.size(), 0);
  std::vector<double> free_at(orders.size(), 0), busy(orders.size(), 0);
  std::vector<int64_t> held(orders.size(), 0);
  Simulation out;
  out.peak_in_flight.assign(orders.size(), 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (size_t st = 0; st < orders.size(); ++st) {
      while (next[st] < orders[st].size()) {
        const Action& a = orders[st][next[st]];
        const double ready = dependency(done, s, int64_t(st), a).second;
        if (ready == kNotYet) break;
        const double cost = a.kind == Action::Forward ? forward_cost : backward_cost;
        const double start = std::max(free_at[st], ready);
        double& finish = done.at(a.kind, a.micro, a.chunk * s.stages + int64_t(st));
        CADRE_CHECK(finish == kNotYet, "pipeline simulation: stage ", st, " runs ", describe(a), " twice");
        finish = free_at[st] = start + cost;
        busy[st] += cost;
        held[st] += a.kind == Action::Forward ? 1 : -1;
        out.peak_in_flight[st] = std::max(out.peak_in_flight[st], held[st]);
        ++next[st];
        progressed = true;
      }
    }
  }
  std::string stuck;
  for (size_t st = 0; st < orders.size(); ++st) {
    if (next[st] == orders[st].size()) continue;
    const Action& a = orders[st][next[st]];
    stuck += str(stuck.empty() ? "" : "; ", "stage ", st, " ", describe(a), " waits for ",
                 dependency(done, s, int64_t(st), a).first);
  }
  if (!stuck.empty()) throw Error(str("pipeline schedule deadlocks: ", stuck));
  double total_busy = 0;
  for (size_t st = 0; st < orders.size(); ++st) {
    out.makespan = std::max(out.makespan, free_at[st]);
    total_busy += busy[st];
  }
  out.bubble = 1.0 - total_busy / (double(s.stages) * out.makespan);
  return out;
}

Simulation simulate(Schedule schedule, const PipelineShape& s, double forward_cost, double backward_cost) {
  std::vector<std::vector<Action>> orders;
  for (int64_t st = 0; st < s.stages; ++st) orders.push_back(stage_actions(schedule, s, st));
  return simulate_orders(orders, s, forward_cost, backward_cost);
}

}  // namespace cadre::pipeline
