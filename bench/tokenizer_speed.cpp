// Encoding speed of Cadre's tokenizer.json reader on one text file, one thread, a freshly loaded
// tokenizer (its word cache cold, as when `data prepare` starts): bench/tokenizer_speed.py runs it
// beside the tokenizers library on the same file and compares the speed and every id.
//
// Usage: tokenizer_speed <tokenizer.json> <text file> [<ids out>]
// Each line of the file is encoded on its own, without special tokens; prints
// "cadre: <MB/s> MB/s (<bytes> bytes, <lines> lines, <seconds> s)".
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/hf_tokenizer.h"

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CADRE_CHECK(in.good(), "tokenizer_speed: cannot read '", path, "'");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

void write_ids(const std::string& path, const std::vector<std::vector<int>>& ids) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& line : ids) {
    for (int id : line) out << id << ' ';
    out << '\n';
  }
  CADRE_CHECK(out.good(), "tokenizer_speed: cannot write '", path, "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: tokenizer_speed <tokenizer.json> <text file> [<ids out>]\n");
    return 2;
  }
  try {
    const std::vector<std::string> lines = read_lines(argv[2]);
    size_t bytes = 0;
    for (const auto& line : lines) bytes += line.size();
    const cadre::HfTokenizer tokenizer(argv[1]);
    std::vector<std::vector<int>> ids(lines.size());
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < lines.size(); ++i) ids[i] = tokenizer.encode(lines[i], false);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("cadre: %.2f MB/s (%zu bytes, %zu lines, %.3f s)\n", bytes / seconds / 1e6, bytes, lines.size(),
                seconds);
    if (argc == 4) write_ids(argv[3], ids);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_speed: %s\n", e.what());
    return 1;
  }
  return 0;
}
