// Durable file writes: write to a temporary name, fsync, rename over the target.
#pragma once

#include <string>

namespace cadre {

// Replaces `path` with `bytes` atomically: readers see the old file or the new, never a part.
void file_write_atomic(const std::string& path, const std::string& bytes);

}  // namespace cadre
