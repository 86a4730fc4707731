// remove_tree: Cadre's own recursive removal (libtorch 2.x exports a clashing
// std::filesystem::remove_all).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file_util.h"
#include "support/process.h"

namespace fs = std::filesystem;

TEST(RemoveTree, RemovesNestedTreesButNotWhatLinksPointTo) {
  cadre::test::TempDir dir("remove-tree");
  const fs::path keep = fs::path(dir.path()) / "keep", tree = fs::path(dir.path()) / "tree";
  fs::create_directories(keep);
  std::ofstream(keep / "precious") << "x";
  fs::create_directories(tree / "a" / "b" / "c");
  for (const fs::path& f : {tree / "top", tree / "a" / "mid", tree / "a" / "b" / "c" / "deep"}) std::ofstream(f) << "y";
  fs::create_directory_symlink(keep, tree / "a" / "link_to_keep");
  fs::create_symlink(keep / "precious", tree / "file_link");
  std::error_code ec;
  cadre::remove_tree(tree.string(), ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(keep / "precious")) << "a link was followed";
  // A missing path is not an error; a plain file is removed too.
  cadre::remove_tree(tree.string(), ec);
  EXPECT_FALSE(ec);
  cadre::remove_tree((keep / "precious").string());
  EXPECT_FALSE(fs::exists(keep / "precious"));
}

TEST(RemoveTree, AFailureIsReportedWithThePath) {
  // Nobody, root included, may unlink a file of /proc: the failure is reported, not ignored.
  std::error_code ec;
  cadre::remove_tree("/proc/self/status", ec);
  EXPECT_TRUE(ec);
  std::string error;
  try {
    cadre::remove_tree("/proc/self/status");
  } catch (const cadre::Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("cannot remove '/proc/self/status'"), std::string::npos) << error;
}
