// Bytes read from a pipe or socket, cut into lines: the agent's worker logs and the membership
// channel between agent and worker both read a stream whose reads end anywhere in a line.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace cadre {

class LineBuffer {
 public:
  // A line longer than max_line_bytes comes out in pieces of that size (a writer that never
  // writes a newline must not make the reader buffer without bound).
  explicit LineBuffer(size_t max_line_bytes = std::numeric_limits<size_t>::max()) : max_line_(max_line_bytes) {}

  // Adds what was read; returns the lines it completed, without their '\n'.
  std::vector<std::string> append(const char* data, size_t size);
  // The unfinished last line (the stream ended without its '\n'), and empties the buffer.
  std::string take_rest();

 private:
  size_t max_line_;
  std::string partial_;
};

}  // namespace cadre
