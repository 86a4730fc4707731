// remove_tree: Cadre's own recursive removal (libtorch 2.x exports a clashing
// std::filesystem::remove_all).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

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

// Agents of several nodes write one metrics.url into a shared log directory: a writer must never
// rename another's temporary file away (it did: "cannot rename 'metrics.url.tmp': No such file
// or directory" ended a Slurm job's attempt in DeploySbatch). The file ends as one writer's whole
// text, and no temporary file is left.
TEST(FileWriteAtomic, ConcurrentWritersOfOnePathNeverFailAndLeaveOneWholeFile) {
  cadre::test::TempDir dir("write-atomic");
  const std::string path = dir.path() + "/metrics.url";
  constexpr int kWriters = 4, kWrites = 200;
  std::vector<std::string> errors(kWriters);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      std::string line(1000, char('a' + w));
      line.push_back('\n');
      try {
        for (int i = 0; i < kWrites; ++i) cadre::file_write_atomic(path, line);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    });
  for (auto& t : writers) t.join();
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(errors[static_cast<size_t>(w)], "") << "writer " << w;
  const std::string text = cadre::file_read(path);
  ASSERT_EQ(text.size(), 1001u);
  EXPECT_EQ(text.find_first_not_of(text[0]), 1000u) << "parts of two writers' texts";
  EXPECT_EQ(text.back(), '\n');
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 1) << "a temporary file was left behind";
}
