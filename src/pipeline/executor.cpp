// A pipeline stage's step (executor.h).
#include "pipeline/executor.h"

#include <ATen/ATen.h>

#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "core/error.h"
#include "pipeline/stage_error.h"

namespace cadre::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs a transfer step, rethrowing its failure with the stage and action it belongs to: a
// neighbour that died or runs another schedule then reads "pipeline stage 0 B3: waiting for the
// gradient from stage 1: <what the collectives layer saw>". `doing` ("waiting for", "sending")
// and `what` ("the gradient from stage 1", built once a step) make the message on failure only.
template <typename Op>
auto in_context(int64_t stage, const Action& a, const char* doing, const std::string& what, Op&& op)
    -> decltype(op()) {
  return rethrow_in_context(std::forward<Op>(op),
                            [&] { return str("pipeline stage ", stage, " ", describe(a), ": ", doing, " ", what); });
}

// Receives on one link, posted in the order the stage's actions consume them, each once the
// stage is at most a few actions before the one that consumes it. Not earlier: a posted receive
// runs under the communicator's op timeout, and under GPipe the first gradient would otherwise
// be awaited through every stage's forwards, however long the forward phase.
class Inbox {
 public:
  // `order`: the consuming actions, with their positions in the stage's list.
  // `stage`, `what` ("the activation from stage 0"): for errors.
  Inbox(std::vector<std::pair<Action, size_t>> order, std::function<comm::Work(const at::Tensor&)> receive,
        const StepShape& step, int64_t stage, std::string what)
      : order_(std::move(order)), receive_(std::move(receive)), step_(step), stage_(stage), what_(std::move(what)) {}

  // Posts the receives of the actions at positions up to `position`.
  void post_until(size_t position) {
    while (posted_ < order_.size() && order_[posted_].second <= position) {
      at::Tensor buffer =
          at::empty(step_.activation_sizes, at::TensorOptions().dtype(step_.activation_dtype).device(step_.device));
      const Action& a = order_[posted_].first;
      pending_.push_back({a, in_context(stage_, a, "receiving", what_, [&] { return receive_(buffer); }), buffer});
      ++posted_;
    }
  }
  // The tensor for `a` (at `position`), which must be the next in order; waits for it.
  at::Tensor take(const Action& a, size_t position, StepFigures& figures) {
    post_until(position);
    CADRE_CHECK(!pending_.empty() && pending_.front().action == a, "pipeline: ", describe(a),
                " asks for a transfer out of the schedule's order");
    Pending next = std::move(pending_.front());
    pending_.pop_front();
    const auto t0 = Clock::now();
    in_context(stage_, a, "waiting for", what_, [&] { next.work.wait(); });
    figures.wait_s += since(t0);
    return next.buffer;
  }

 private:
  struct Pending {
    Action action;
    comm::Work work;
    at::Tensor buffer;
  };
  std::vector<std::pair<Action, size_t>> order_;
  std::function<comm::Work(const at::Tensor&)> receive_;
  const StepShape& step_;
  int64_t stage_;
  std::string what_;
  size_t posted_ = 0;
  std::deque<Pending> pending_;
};

struct Held {
  at::Tensor input, output;
};

// Sends still in flight, each with the tensor it reads and what it is (for errors); the finished
// ones are dropped (their errors rethrown) as the step goes, so a sent activation is not kept to
// the end of the step.
class Outbox {
 public:
  explicit Outbox(int64_t stage) : stage_(stage) {}
  // `what`: "the activation to stage 1", alive for the step.
  void add(const Action& a, const std::string& what, const std::function<comm::Work()>& send, at::Tensor t) {
    for (size_t i = 0; i < sent_.size();) {
      if (!sent_[i].work.done()) {
        ++i;
        continue;
      }
      finish(sent_[i]);
      sent_.erase(sent_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    comm::Work work = in_context(stage_, a, "sending", what, send);
    sent_.push_back({a, &what, std::move(work), std::move(t)});
  }
  void wait_all() {
    for (Sent& s : sent_) finish(s);
    sent_.clear();
  }

 private:
  struct Sent {
    Action action;
    const std::string* what;
    comm::Work work;
    at::Tensor tensor;
  };
  void finish(Sent& s) { in_context(stage_, s.action, "sending", *s.what, [&] { s.work.wait(); }); }

  int64_t stage_;
  std::vector<Sent> sent_;
};

}  // namespace

StepFigures run_step(const StageWork& work, Links& links, const StepShape& step) {
  const int64_t stage = links.stage(), p = links.stages();
  CADRE_CHECK(step.shape.stages == p, "pipeline: a ", step.shape.stages, "-stage schedule on ", p, " stages");
  const std::vector<Action> actions = stage_actions(step.schedule, step.shape, stage);
  const int64_t last = step.shape.virtual_stages() - 1;
  auto virtual_stage = [&](const Action& a) { return a.chunk * p + stage; };
  // What arrives, in the order it is consumed: activations for forwards past virtual stage 0,
  // gradients for backwards before the last.
  std::vector<std::pair<Action, size_t>> activations_in, gradients_in;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (a.kind == Action::Forward && virtual_stage(a) > 0) activations_in.emplace_back(a, i);
    if (a.kind == Action::Backward && virtual_stage(a) < last) gradients_in.emplace_back(a, i);
  }
  // What crosses to and from the neighbours (wrapping around for interleaved chunks), for errors.
  const std::string previous = str("stage ", (stage + p - 1) % p), next = str("stage ", (stage + 1) % p);
  const std::string activation_out = "the activation to " + next, gradient_out = "the gradient to " + previous;
  Inbox activations(activations_in, [&](const at::Tensor& t) { return links.receive_activation(t); }, step, stage,
                    "the activation from " + previous);
  Inbox gradients(gradients_in, [&](const at::Tensor& t) { return links.receive_gradient(t); }, step, stage,
                  "the gradient from " + next);
  std::map<int64_t, int64_t> last_backward;  // chunk -> its last backward's micro-batch
  for (const Action& a : actions)
    if (a.kind == Action::Backward) last_backward[a.chunk] = a.micro;
  StepFigures figures;
  std::map<std::pair<int64_t, int64_t>, Held> held;  // (chunk, micro) -> what its backward needs
  Outbox sent(stage);
  constexpr size_t kPostAhead = 2;  // actions: a transfer overlaps the compute before it
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    activations.post_until(i + kPostAhead);
    gradients.post_until(i + kPostAhead);
    const int64_t g = virtual_stage(a);
    Held& h = held[{a.chunk, a.micro}];
    if (a.kind == Action::Forward) {
      if (g > 0) h.input = activations.take(a, i, figures).requires_grad_(true);
      const auto t0 = Clock::now();
      h.output = work.forward(a.chunk, a.micro, h.input);
      figures.compute_s += since(t0);
      if (g < last) {
        CADRE_CHECK(h.output.sizes().vec() == step.activation_sizes && h.output.scalar_type() == step.activation_dtype,
                    "pipeline stage ", stage, " ", describe(a), ": output ", h.output.sizes(), " ",
                    h.output.scalar_type(), ", the next stage expects ", at::IntArrayRef(step.activation_sizes), " ",
                    step.activation_dtype);
        at::Tensor out = h.output.detach().contiguous();
        sent.add(a, activation_out, [&] { return links.send_activation(out); }, out);
      }
      continue;
    }
    const at::Tensor grad = g < last ? gradients.take(a, i, figures) : at::Tensor();
    const auto t0 = Clock::now();
    if (work.before_backward) work.before_backward(a.chunk, a.micro, last_backward[a.chunk] == a.micro);
    if (g < last) h.output.backward(grad);
    else h.output.backward();
    figures.compute_s += since(t0);
    if (g > 0) {
      CADRE_CHECK(h.input.grad().defined(), "pipeline stage ", stage, " ", describe(a),
                  ": the stage's input got no gradient (its output does not depend on it)");
      at::Tensor back = h.input.grad().contiguous();
      sent.add(a, gradient_out, [&] { return links.send_gradient(back); }, back);
    }
    held.erase({a.chunk, a.micro});
  }
  const auto t0 = Clock::now();
  sent.wait_all();
  figures.wait_s += since(t0);
  return figures;
}

}  // namespace cadre::pipeline
