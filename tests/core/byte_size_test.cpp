// parse_byte_size and format_bytes (core/byte_size.h).
#include <gtest/gtest.h>

#include "core/byte_size.h"
#include "core/error.h"

TEST(ByteSize, UnitsAreBinaryOrDecimalAsWritten) {
  EXPECT_EQ(cadre::parse_byte_size("1048576", "k"), 1048576);
  EXPECT_EQ(cadre::parse_byte_size("512MiB", "k"), int64_t(512) << 20);
  EXPECT_EQ(cadre::parse_byte_size("24 GiB", "k"), int64_t(24) << 30);
  EXPECT_EQ(cadre::parse_byte_size("1.5G", "k"), int64_t(3) << 29);
  EXPECT_EQ(cadre::parse_byte_size("8GB", "k"), int64_t(8000000000));
  EXPECT_EQ(cadre::parse_byte_size("0", "k"), 0);
}

TEST(ByteSize, BadSizesNameTheKey) {
  for (const char* bad : {"", "lots", "12 parsecs", "-1GiB", "1e30", "GiB"}) {
    try {
      cadre::parse_byte_size(bad, "train.memory_limit");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("train.memory_limit"), std::string::npos) << e.what();
    }
  }
}

TEST(ByteSize, FormatsInTheLargestWholeUnit) {
  EXPECT_EQ(cadre::format_bytes(512), "512 B");
  EXPECT_EQ(cadre::format_bytes(int64_t(3) << 29), "1.50 GiB");
  EXPECT_EQ(cadre::format_bytes(int64_t(730) << 20), "730.00 MiB");
}
