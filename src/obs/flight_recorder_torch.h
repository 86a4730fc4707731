// The flight recorder's state in PyTorch's own dump format, so PyTorch's analyzer
// (`python -m torch.distributed.flight_recorder.fr_trace <dir>`, the `torchfrtrace` command)
// reads Cadre's dumps as it reads ProcessGroupNCCL's: one pickle per rank, named
// <dir>/pytorch_trace_rank_<R>, holding a dict with "version", "pg_config", "pg_status",
// "comm_lib_version" and "entries" (see flight_recorder_torch.cpp for the mapping).
#pragma once

#include <string>

#include "obs/flight_recorder.h"

namespace cadre::obs {

// The dump format version written: torch 2.11's ProcessGroupNCCL writes "2.10".
inline constexpr const char* kTorchFlightRecorderVersion = "2.10";

// The pickle's bytes for `state` (its rank must be set).
std::string flight_recorder_torch_dump(const FlightRecorderState& state);

// <dir>/pytorch_trace_rank_<rank>: the analyzer takes the rank from the digits after the
// common prefix.
std::string flight_recorder_torch_dump_path(const std::string& dir, int rank);

}  // namespace cadre::obs
