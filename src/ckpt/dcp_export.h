// Export to PyTorch's distributed checkpoint (DCP) layout, so Python loads a Cadre checkpoint
// with torch 2.x's torch.distributed.checkpoint (checked with torch 2.11, tests/ckpt/export_test.cpp):
//   <dir>/__0_0.distcp  every chunk, each in torch.save's format, end to end
//   <dir>/.metadata     a pickle of DCP's Metadata: per tensor its size and chunks (offsets
//                       and sizes per dimension), where each chunk's bytes are
// A checkpoint's pieces are boxes with exactly DCP's meaning, so each becomes one chunk
// (a version-1 checkpoint's ranges are exported as whole tensors). The classes pickled are
// torch 2.x's (torch.distributed.checkpoint.*); torch 1.13, which had them under
// torch.distributed._shard, cannot read the export.
#pragma once

#include <map>
#include <string>

#include "ckpt/checkpoint_reader.h"

namespace cadre {

// Writes the tensors `names` maps (checkpoint tensor -> the name Python sees) into `dir`.
// Returns the number of chunks written.
int64_t dcp_export(const CheckpointReader& reader, const std::map<std::string, std::string>& names,
                   const std::string& dir);

}  // namespace cadre
