// Test support: a Hugging Face folder that differs from another in one weight, for checks that
// something trained on one base is refused on another.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cadre::test {

// Flips one bit of the last byte of folder `dir`'s first safetensors file (by name): the high
// byte of its last tensor's last element (little-endian float32, bfloat16 or float16), so that
// element's value changes and the file still parses.
inline void change_one_hf_weight(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  if (files.empty()) throw std::runtime_error("no safetensors file in " + dir.string());
  std::sort(files.begin(), files.end());
  std::fstream f(files.front(), std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  const char last = static_cast<char>(f.get());
  f.seekp(-1, std::ios::end);
  f.put(static_cast<char>(last ^ 0x01));
  if (!f) throw std::runtime_error("could not change " + files.front().string());
}

// A copy of folder `from` at `to` with one weight changed (change_one_hf_weight).
inline void copy_hf_folder_with_one_weight_changed(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  change_one_hf_weight(to);
}

}  // namespace cadre::test
