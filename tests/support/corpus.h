// Generated English-like text for tests that need a corpus without the npm download.
#pragma once

#include <cstdint>
#include <string>

namespace cadre::test {

// Writes `files` text files of about `bytes_per_file` bytes each into dir; deterministic.
void write_corpus(const std::string& dir, int files, size_t bytes_per_file, uint64_t seed = 1);

}  // namespace cadre::test
