// Whole-file reads, and durable file writes: write to a temporary name, fsync, rename over the target.
#pragma once

#include <string>

namespace cadre {

// Replaces `path` with `bytes` atomically: readers see the old file or the new, never a part.
void file_write_atomic(const std::string& path, const std::string& bytes);

// The whole content of `path`; Error naming the file when it cannot be read.
std::string file_read(const std::string& path);

}  // namespace cadre
