// safetensors reading (the round trip is in export_test.cpp): damaged headers (a length past the end, offsets that
// wrap around, negative dimensions, sizes that disagree with the shape) are errors naming the
// file, never out-of-bounds copies or libtorch exceptions.
#include <gtest/gtest.h>

#include <cstring>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "support/process.h"

namespace {

// A safetensors file with one F32 tensor entry described by `entry` (JSON) and `data_bytes`
// bytes of data.
std::string file_with(const std::string& entry, size_t data_bytes) {
  std::string header = "{\"t\": " + entry + "}";
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\x01');
}

std::string read_error(const cadre::test::TempDir& dir, const std::string& bytes) {
  const std::string path = dir / "t.safetensors";
  cadre::test::write_text(path, bytes);
  try {
    cadre::safetensors_read(path);
  } catch (const cadre::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, DamagedHeadersAreErrorsNamingTheFile) {
  cadre::test::TempDir dir("st-damaged");
  std::string ok = file_with(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", 8);
  EXPECT_EQ(read_error(dir, ok), "");
  std::string huge_length = ok;
  std::memset(huge_length.data(), 0xff, 8);  // 8 + n wraps around
  const std::vector<std::pair<std::string, std::string>> cases = {
      {huge_length, "header claims"},
      {ok.substr(0, 5), "truncated"},
      // begin and end near 2^64: `8 + header + end` wraps to a small number
      {file_with(R"({"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551608, 18446744073709551612]})", 8),
       "outside the file"},
      {file_with(R"({"dtype": "F32", "shape": [-1, -2], "data_offsets": [0, 8]})", 8), "negative dimension"},
      {file_with(R"({"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]})", 8), "overflows"},
      {file_with(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})", 8), "do not match its shape"},
      {file_with(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", 4), "outside the file"},
      {file_with(R"({"dtype": "F32", "shape": "two", "data_offsets": [0, 8]})", 8), "malformed entry"},
      {file_with(R"({"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]})", 8), "unsupported dtype"},
  };
  for (const auto& [bytes, expected] : cases) {
    std::string error = read_error(dir, bytes);
    EXPECT_NE(error.find(expected), std::string::npos) << expected << ": " << error;
    EXPECT_NE(error.find("t.safetensors"), std::string::npos) << expected << ": " << error;
  }
}
