// Duration formatting used by progress lines (ETA).
#include <gtest/gtest.h>

#include "core/progress.h"

TEST(Progress, FormatDuration) {
  EXPECT_EQ(cadre::format_duration(5.2), "5s");
  EXPECT_EQ(cadre::format_duration(65), "1m05s");
  EXPECT_EQ(cadre::format_duration(3720), "1h02m");
  EXPECT_EQ(cadre::format_duration(-1), "?");
}
