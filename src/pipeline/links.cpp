// The two-rank communicators of a pipeline's edges (links.h).
#include "pipeline/links.h"

#include <algorithm>

#include "core/error.h"

namespace cadre::pipeline {

Links::Links(comm::Communicator& pp, bool wrap) : stage_(pp.rank()), stages_(pp.size()) {
  const int p = pp.size();
  // Edge e runs from stage e to stage e + 1 (mod p for the wrapping edge). Every rank takes its
  // edges in increasing e, so two ranks never wait on each other for different edges.
  for (int from = 0; from < p; ++from) {
    const int to = (from + 1) % p;
    if (p == 1 || (to == 0 && !wrap)) continue;
    if (stage_ != from && stage_ != to) continue;
    const std::vector<int> pair = {std::min(from, to), std::max(from, to)};
    auto act = pp.subgroup(pair, str("pp.act", from, "to", to));
    auto grad = pp.subgroup(pair, str("pp.grad", to, "to", from));
    if (stage_ == from) {
      act_out_ = std::move(act);
      grad_in_ = std::move(grad);
    } else {
      act_in_ = std::move(act);
      grad_out_ = std::move(grad);
    }
  }
}

std::vector<comm::Communicator*> Links::communicators() const {
  std::vector<comm::Communicator*> out;
  for (const auto* link : {&act_out_, &grad_in_, &act_in_, &grad_out_})
    if (*link) out.push_back(link->get());
  return out;
}

}  // namespace cadre::pipeline
