// LineBuffer: lines split across reads, several lines in one read, an overlong line in pieces,
// and the unfinished rest at the end of the stream.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/line_buffer.h"

namespace {

using Lines = std::vector<std::string>;

Lines append(cadre::LineBuffer& b, const std::string& s) { return b.append(s.data(), s.size()); }

TEST(LineBuffer, LinesComeWholeWhereverTheReadsEnd) {
  cadre::LineBuffer b;
  EXPECT_EQ(append(b, "{\"round\": "), Lines{});
  EXPECT_EQ(append(b, "4}\n{\"round\""), (Lines{"{\"round\": 4}"}));
  EXPECT_EQ(append(b, ": 5}\n\nlast\n"), (Lines{"{\"round\": 5}", "", "last"}));
  EXPECT_EQ(b.take_rest(), "");
}

TEST(LineBuffer, AnOverlongLineComesInPiecesAndTheRestAtTheEnd) {
  cadre::LineBuffer b(4);
  EXPECT_EQ(append(b, "abcdefghij"), (Lines{"abcd", "efgh"}));
  EXPECT_EQ(append(b, "k\nxy"), (Lines{"ijk"}));
  EXPECT_EQ(b.take_rest(), "xy");
  EXPECT_EQ(b.take_rest(), "");
}

}  // namespace
