// Token shard format and dataset manifests: round trip, and every kind of damage (including
// sizes that overflow) is caught with the file named.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "data/manifest.h"
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

// A header whose count makes `64 + count * token_bytes` wrap around to the file's own size
// (64 bytes: a header and nothing else) is refused, not mapped and read out of bounds.
TEST(TokenShard, AnOverflowingCountIsRefused) {
  cadre::test::TempDir dir("shard-overflow");
  cadre::ShardHeader h{};
  std::memcpy(h.magic, cadre::kShardMagic, sizeof h.magic);
  h.version = cadre::kShardVersion;
  h.token_bytes = 2;
  h.count = uint64_t(1) << 63;  // x 2 = 2^64 = 0 after wrapping
  h.checksum = cadre::fnv1a64(nullptr, 0);
  const std::string path = dir / "wrap.bin";
  cadre::test::write_text(path, std::string(reinterpret_cast<const char*>(&h), sizeof h));
  std::string msg = error_of(path);
  EXPECT_NE(msg.find("wrap.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than any file holds"), std::string::npos) << msg;
}

// token() and read() are bounds-checked: an index past the end is an error naming the file.
TEST(TokenShard, ReadsPastTheEndAreErrors) {
  cadre::test::TempDir dir("shard-bounds");
  cadre::shard_write(dir / "s.bin", {1, 2, 3, 4, 5}, 2);
  ShardReader r(dir / "s.bin", true);
  EXPECT_EQ(r.token(4), 5u);
  EXPECT_THROW(r.token(5), cadre::Error);
  std::vector<int64_t> out(8);
  EXPECT_THROW(r.read(4, 2, out.data()), cadre::Error);
  EXPECT_THROW(r.read(1, UINT64_MAX, out.data()), cadre::Error);  // first + n wraps around
}

// Dataset manifests: a sample length or vocabulary that is not positive, an unknown token
// width, negative or overflowing sample counts are ConfigErrors naming the file and field.
TEST(DatasetManifest, ShapesTheLoaderRelyOnAreChecked) {
  cadre::test::TempDir dir("manifest-bad");
  auto message = [&](const std::string& field, const std::string& value) {
    std::string shards = R"([{"file": "train_00000.bin", "samples": 10, "checksum": 1}])";
    std::map<std::string, std::string> fields = {{"version", "1"},  {"tokenizer", "\"t.model\""}, {"vocab_size", "300"},
                                                 {"seq_len", "32"}, {"token_bytes", "2"},         {"bos_id", "1"},
                                                 {"eos_id", "2"},   {"documents", "3"},           {"tokens", "330"},
                                                 {"train", shards}, {"val", "[]"}};
    fields[field] = value;
    std::string text = "{";
    for (const auto& [k, v] : fields) text += (text.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
    cadre::test::write_text(dir / "manifest.json", text + "}");
    try {
      cadre::manifest_read(dir.path());
    } catch (const cadre::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message("version", "1"), "");
  EXPECT_NE(message("seq_len", "0").find("seq_len must be positive"), std::string::npos);
  EXPECT_NE(message("seq_len", "-5").find("seq_len must be positive"), std::string::npos);
  EXPECT_NE(message("vocab_size", "0").find("vocab_size"), std::string::npos);
  EXPECT_NE(message("token_bytes", "3").find("token_bytes must be 2 or 4"), std::string::npos);
  EXPECT_NE(message("train", R"([{"file": "a.bin", "samples": -1, "checksum": 1}])").find("'samples' is negative"),
            std::string::npos);
  EXPECT_NE(message("train", R"([{"file": "a.bin", "samples": 9223372036854775807, "checksum": 1}])").find("overflow"),
            std::string::npos);
  EXPECT_NE(message("seq_len", "\"long\"").find("manifest.json"), std::string::npos);
}
