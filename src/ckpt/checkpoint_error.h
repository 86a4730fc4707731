// The error a damaged or incomplete checkpoint raises (missing file, bad checksum, truncated
// or malformed manifest): resume skips such a checkpoint and tries an older one.
#pragma once

#include "core/error.h"

namespace cadre {

class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace cadre
