// Token shard format: round trip, and every kind of damage is caught with the file named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/token_shard.h"
#include "support/process.h"

using cadre::ShardReader;

namespace {
std::string error_of(const std::string& path) {
  try {
    ShardReader r(path, true);
  } catch (const cadre::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TokenShard, RoundTripBothWidths) {
  cadre::test::TempDir dir("shard");
  std::vector<uint32_t> tokens = {0, 1, 65535, 42, 7};
  cadre::shard_write(dir / "a.bin", tokens, 2);
  ShardReader a(dir / "a.bin", true);
  ASSERT_EQ(a.size(), tokens.size());
  EXPECT_EQ(a.token_bytes(), 2u);
  std::vector<int64_t> out(tokens.size());
  a.read(0, tokens.size(), out.data());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(out[i], tokens[i]);

  tokens.push_back(1u << 20);
  cadre::shard_write(dir / "b.bin", tokens, 4);
  ShardReader b(dir / "b.bin", true);
  EXPECT_EQ(b.token(5), 1u << 20);
  EXPECT_THROW(cadre::shard_write(dir / "c.bin", tokens, 2), cadre::Error);  // does not fit 16 bits
  EXPECT_FALSE(std::filesystem::exists(dir / "c.bin"));
}

TEST(TokenShard, DamageIsDetectedAndNamesTheFile) {
  cadre::test::TempDir dir("shard-bad");
  std::vector<uint32_t> tokens(1000, 3);
  std::string path = dir / "s.bin";
  cadre::shard_write(path, tokens, 2);

  {  // flipped byte in the payload
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 500);
    f.put(static_cast<char>(0x7f));
  }
  std::string msg = error_of(path);
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;

  cadre::shard_write(path, tokens, 2);
  std::filesystem::resize_file(path, 64 + 1000);  // truncated
  msg = error_of(path);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  cadre::test::write_text(dir / "text.bin", std::string(100, 'x'));
  msg = error_of(dir / "text.bin");
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
  EXPECT_NE(error_of(dir / "missing.bin").find("missing.bin"), std::string::npos);
}
