// How a pipeline stage's failed transfer reads: "pipeline stage 0 B3: waiting for the gradient
// from stage 1: <what the collectives layer saw>", the stage, what it was doing and the
// neighbour it was doing it with. The step's executor, validation and the step's time split
// all rethrow through here.
#pragma once

#include <exception>

#include "core/error.h"

namespace cadre::pipeline {

// Runs `op`, rethrowing its failure as an Error led by `context()`, which is called only then:
// the path that succeeds builds no message.
template <typename Op, typename Context>
auto rethrow_in_context(Op&& op, Context&& context) -> decltype(op()) {
  try {
    return op();
  } catch (const std::exception& e) {
    throw Error(str(context(), ": ", e.what()));
  }
}

}  // namespace cadre::pipeline
