// The checkpoint format and its life cycle, in one process: pieces written by several
// "ranks" (threads agreeing through a latch) merge into one manifest; any slice reads back
// across piece boundaries; keep-K pruning; and every kind of damage (flipped byte, truncated
// or missing shard, missing marker, failed write) is reported by name and never touches the
// previous checkpoint.
#include <gtest/gtest.h>

#include <array>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_saver.h"
#include "ckpt/checksum.h"
#include "support/process.h"

namespace fs = std::filesystem;

namespace {

using cadre::CheckpointError;
using cadre::CheckpointManifest;
using cadre::CheckpointReader;
using cadre::CheckpointSaver;

// Agreement between threads standing in for ranks: the AND of what every party passed,
// round after round.
class ThreadAgreement {
 public:
  explicit ThreadAgreement(int parties) : parties_(parties) {}
  bool agree(bool ok) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t round = round_;
    all_ok_ = all_ok_ && ok;
    if (++arrived_ == parties_) {
      result_ = all_ok_;
      all_ok_ = true;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }

 private:
  int parties_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t round_ = 0;
  bool all_ok_ = true, result_ = true;
};

// A float tensor of `numel` elements whose value i is base + i, so any slice is checkable.
std::vector<float> ramp(int64_t numel, float base) {
  std::vector<float> v(static_cast<size_t>(numel));
  std::iota(v.begin(), v.end(), base);
  return v;
}

CheckpointManifest header(int64_t step, int64_t world) {
  CheckpointManifest h;
  h.step = step;
  h.world_size = world;
  h.strategy = "FULL_SHARD";
  h.state = {{"data_position", step * 8}, {"optimizer_steps", step}};
  h.config_yaml = "model: {}\n";
  return h;
}

// Rank r of `world` stages its contiguous share of tensors "a" [6, 5] and "b" [7].
void stage_share(cadre::Snapshot& snap, int64_t rank, int64_t world, float base) {
  for (auto [name, shape] : {std::pair<std::string, std::vector<int64_t>>{"a", {6, 5}}, {"b", {7}}}) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const int64_t per = (numel + world - 1) / world, start = std::min(numel, rank * per);
    const int64_t count = std::min(numel, start + per) - start;
    if (count == 0) continue;
    auto values = ramp(numel, base);
    char* out = snap.add({name, "float32", shape, start, count, 0});
    std::memcpy(out, values.data() + start, static_cast<size_t>(count) * sizeof(float));
  }
}

// Saves step `step` as `world` ranks (threads); returns each rank's error ("" if none).
std::vector<std::string> save_as_ranks(const std::string& dir, int64_t step, int64_t world, float base, int64_t keep = 3,
                                       int64_t failing_rank = -1) {
  ThreadAgreement agreement(static_cast<int>(world));
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        CheckpointSaver saver({dir, r, world, keep, /*async=*/true}, [&](bool ok) { return agreement.agree(ok); });
        cadre::Snapshot& snap = saver.stage();
        stage_share(snap, r, world, base);
        if (r == failing_rank) {
          // Its file name is taken by a directory: open() fails as a full disk would.
          fs::create_directories(dir + "/" + cadre::checkpoint_partial_name(step) + "/" +
                                 cadre::checkpoint_rank_file(r, world));
        }
        saver.submit(header(step, world));
        saver.wait();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(offset);
  f.write(&c, 1);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Crc32c, MatchesTheStandardCheckValueAndExtends) {
  const std::string text = "123456789";
  EXPECT_EQ(cadre::crc32c(text.data(), text.size()), 0xE3069283u);  // the CRC-32C check value
  std::vector<char> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  const uint32_t whole = cadre::crc32c(bytes.data(), bytes.size());
  EXPECT_EQ(cadre::crc32c(bytes.data() + 333, 667, cadre::crc32c(bytes.data(), 333)), whole);
  bytes[500] ^= 1;
  EXPECT_NE(cadre::crc32c(bytes.data(), bytes.size()), whole);
}

TEST(CheckpointFormat, ThreeRanksWriteOneManifestAndAnySliceReadsBack) {
  cadre::test::TempDir dir("ckpt-format");
  auto errors = save_as_ranks(dir.path(), 10, 3, 100.f);
  for (const auto& e : errors) ASSERT_EQ(e, "");
  const std::string path = dir / "step-00000010";
  ASSERT_TRUE(fs::exists(path + "/COMMITTED"));
  EXPECT_FALSE(fs::exists(dir / ".step-00000010.partial"));
  EXPECT_FALSE(fs::exists(path + "/rank-00000.index.json")) << "rank indexes are merged into the manifest";

  CheckpointReader reader(path);
  const auto& m = reader.manifest();
  EXPECT_EQ(m.step, 10);
  EXPECT_EQ(m.world_size, 3);
  EXPECT_EQ(m.state.at("data_position"), 80);
  ASSERT_EQ(m.files.size(), 3u);
  EXPECT_EQ(reader.tensor("a").shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(reader.tensor("a").pieces.size(), 3u);
  // Elements 5..27 of "a" span all three ranks' pieces.
  std::vector<float> got(23);
  reader.read("a", 5, 23, got.data());
  for (int i = 0; i < 23; ++i) EXPECT_EQ(got[i], 105.f + i) << i;
  std::vector<float> b(7);
  reader.read("b", 0, 7, b.data());
  EXPECT_EQ(b, ramp(7, 100.f));
  int64_t checked = 0;
  EXPECT_TRUE(reader.verify(&checked).empty());
  EXPECT_EQ(checked, (30 + 7) * 4);
}

TEST(CheckpointFormat, KeepsTheNewestKAndReplacesASameStepCheckpoint) {
  cadre::test::TempDir dir("ckpt-keep");
  for (int64_t step = 1; step <= 5; ++step)
    for (const auto& e : save_as_ranks(dir.path(), step, 2, float(step), /*keep=*/2)) ASSERT_EQ(e, "");
  auto complete = cadre::checkpoint_list_complete(dir.path());
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(complete[0].step, 5);
  EXPECT_EQ(complete[1].step, 4);
  // Saving step 5 again (e.g. after resuming from 4) replaces it.
  for (const auto& e : save_as_ranks(dir.path(), 5, 2, 50.f, 2)) ASSERT_EQ(e, "");
  std::vector<float> b(1);
  CheckpointReader(dir / "step-00000005").read("b", 0, 1, b.data());
  EXPECT_EQ(b[0], 50.f);
}

TEST(CheckpointFormat, AFlippedByteIsCaughtAndNamed) {
  cadre::test::TempDir dir("ckpt-flip");
  for (const auto& e : save_as_ranks(dir.path(), 3, 2, 0.f)) ASSERT_EQ(e, "");
  const std::string path = dir / "step-00000003";
  flip_byte(path + "/rank-00001-of-00002.bin", 9);
  CheckpointReader reader(path);
  std::vector<float> all(30);
  std::string error = error_of([&] { reader.read("a", 0, 30, all.data()); });
  EXPECT_NE(error.find("checksum mismatch in rank-00001-of-00002.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("tensor 'a'"), std::string::npos) << error;
  // Rank 0's half is intact and still reads.
  EXPECT_EQ(error_of([&] { reader.read("a", 0, 15, all.data()); }), "");
  auto problems = reader.verify();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("rank-00001-of-00002.bin"), std::string::npos);
}

TEST(CheckpointFormat, TruncatedMissingOrUnmarkedCheckpointsAreRefused) {
  cadre::test::TempDir dir("ckpt-damage");
  for (int64_t step : {1, 2, 3})
    for (const auto& e : save_as_ranks(dir.path(), step, 2, 0.f)) ASSERT_EQ(e, "");
  fs::resize_file(dir / "step-00000001/rank-00000-of-00002.bin", 10);
  fs::remove(dir / "step-00000002/rank-00001-of-00002.bin");
  fs::remove(dir / "step-00000003/COMMITTED");
  std::string truncated = error_of([&] { CheckpointReader r(dir / "step-00000001"); });
  EXPECT_NE(truncated.find("rank-00000-of-00002.bin has 10 bytes"), std::string::npos) << truncated;
  std::string missing = error_of([&] { CheckpointReader r(dir / "step-00000002"); });
  EXPECT_NE(missing.find("shard file rank-00001-of-00002.bin of rank 1 is missing"), std::string::npos) << missing;
  std::string unmarked = error_of([&] { CheckpointReader r(dir / "step-00000003"); });
  EXPECT_NE(unmarked.find("incomplete"), std::string::npos) << unmarked;
  // Only committed directories count, and cleanup removes the unmarked one and partials.
  EXPECT_EQ(cadre::checkpoint_list_complete(dir.path()).size(), 2u);
  fs::create_directories(dir / ".step-00000004.partial");
  auto removed = cadre::checkpoint_remove_incomplete(dir.path());
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_FALSE(fs::exists(dir / "step-00000003"));
  EXPECT_FALSE(fs::exists(dir / ".step-00000004.partial"));
}

TEST(CheckpointFormat, AFailedWriteOnOneRankFailsTheSaveOnAllAndKeepsThePreviousOne) {
  cadre::test::TempDir dir("ckpt-fail");
  for (const auto& e : save_as_ranks(dir.path(), 1, 2, 7.f)) ASSERT_EQ(e, "");
  auto errors = save_as_ranks(dir.path(), 2, 2, 9.f, 3, /*failing_rank=*/1);
  EXPECT_NE(errors[1].find("checkpoint step 2 was not saved: checkpoint rank 1: cannot create"), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[0].find("another rank failed"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("earlier checkpoints"), std::string::npos) << errors[0];
  EXPECT_FALSE(fs::exists(dir / ".step-00000002.partial"));
  EXPECT_FALSE(fs::exists(dir / "step-00000002"));
  CheckpointReader previous(dir / "step-00000001");
  EXPECT_TRUE(previous.verify().empty());
}

TEST(CheckpointFormat, MergeRefusesGapsAndOverlaps) {
  auto index = [](int64_t start, int64_t count) {
    CheckpointManifest m = header(1, 2);
    m.files.push_back({"f", 1000, 0});
    m.tensors["t"] = {"float32", {10}, {{0, 0, start, count, 0}}};
    return m;
  };
  auto message = [&](std::vector<CheckpointManifest> parts) {
    try {
      cadre::manifest_merge(parts);
    } catch (const cadre::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({index(0, 5), index(5, 5)}), "");
  EXPECT_NE(message({index(0, 4), index(5, 5)}).find("missing"), std::string::npos);
  EXPECT_NE(message({index(0, 6), index(5, 5)}).find("twice"), std::string::npos);
  EXPECT_NE(message({index(0, 5)}).find("missing"), std::string::npos);
}

TEST(CheckpointFormat, AMalformedManifestIsACheckpointError) {
  EXPECT_NE(error_of([] { cadre::manifest_parse("{\"format\": \"cadre-checkpoint\"", "m.json"); }).find("m.json: malformed"),
            std::string::npos);
  EXPECT_NE(error_of([] { cadre::manifest_parse("{\"format\": \"other\"}", "m.json"); }).find("not a Cadre checkpoint"),
            std::string::npos);
}

namespace {

// The manifest.json of `checkpoint`, edited by `edit` and written back as Cadre writes it.
void edit_manifest(const std::string& checkpoint, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = checkpoint + "/manifest.json";
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  edit(j);
  std::ofstream(path) << j.dump(1) << "\n";
}

// A one-tensor manifest text ("t", float32, `shape`) with the given pieces in file "f" of
// `file_bytes` bytes: [start, count, offset] each.
std::string manifest_text(const std::vector<int64_t>& shape, const std::vector<std::array<int64_t, 3>>& pieces,
                          int64_t file_bytes = 1 << 20) {
  CheckpointManifest m = header(1, 1);
  m.files.push_back({"f", file_bytes, 0});
  cadre::TensorRecord t{"float32", shape, {}};
  for (const auto& p : pieces) t.pieces.push_back({0, p[2], p[0], p[1], 0});
  m.tensors["t"] = t;
  return cadre::manifest_to_json(m);
}

std::string parse_error(const std::string& text) {
  return error_of([&] { cadre::manifest_parse(text, "m.json"); });
}

}  // namespace

// Coverage is checked when a manifest is read, not only when it is merged: pieces out of
// order, overlapping or leaving a gap mean the manifest was edited or damaged, and loading it
// would place weights at the wrong elements with every CRC passing.
TEST(CheckpointFormat, ManifestPiecesMustBeSortedDisjointAndCovering) {
  EXPECT_EQ(parse_error(manifest_text({10}, {{0, 5, 0}, {5, 5, 20}})), "");
  EXPECT_NE(parse_error(manifest_text({10}, {{0, 5, 0}, {4, 5, 20}})).find("tensor 't'"), std::string::npos);
  EXPECT_NE(parse_error(manifest_text({10}, {{0, 5, 0}, {6, 4, 20}})).find("missing"), std::string::npos);
  EXPECT_NE(parse_error(manifest_text({10}, {{0, 5, 0}, {4, 6, 20}})).find("twice"), std::string::npos);
  EXPECT_NE(parse_error(manifest_text({10}, {{5, 5, 20}, {0, 5, 0}})).find("elements 0..5 are missing"), std::string::npos);
  EXPECT_NE(parse_error(manifest_text({10}, {{0, 5, 0}})).find("elements 5..10 are missing"), std::string::npos);
}

// Sizes in a manifest are checked with overflow-safe arithmetic: a count whose byte size wraps
// around to 0, a shape whose product overflows, and negative dimensions are CheckpointErrors.
TEST(CheckpointFormat, ManifestSizesThatOverflowOrAreNegativeAreRefused) {
  const int64_t big = int64_t(1) << 62;  // x 4 bytes per float wraps to 0
  EXPECT_NE(parse_error(manifest_text({big}, {{0, big, 0}})).find("outside its tensor or file"), std::string::npos);
  EXPECT_NE(parse_error(manifest_text({big, 8}, {{0, 1, 0}})).find("fit 64 bits"), std::string::npos);
  EXPECT_NE(parse_error(manifest_text({-2, -3}, {{0, 6, 0}})).find("negative dimension"), std::string::npos);
  EXPECT_NE(parse_error(manifest_text({10}, {{std::numeric_limits<int64_t>::max(), 2, 0}})).find("outside"),
            std::string::npos);
  EXPECT_NE(parse_error(manifest_text({10}, {{0, 10, std::numeric_limits<int64_t>::max() - 8}})).find("outside"),
            std::string::npos);
}

// COMMITTED records the manifest's checksum: an edit that keeps the pieces consistent (the
// data position here) is caught too, by the reader and by verify, before anything is read.
TEST(CheckpointFormat, AnEditedManifestIsCaughtByTheChecksumInCommitted) {
  cadre::test::TempDir dir("ckpt-edit");
  for (const auto& e : save_as_ranks(dir.path(), 3, 2, 0.f)) ASSERT_EQ(e, "");
  const std::string path = dir / "step-00000003";
  EXPECT_EQ(error_of([&] { CheckpointReader r(path); }), "");
  edit_manifest(path, [](nlohmann::json& j) { j["state"]["data_position"] = 25; });
  std::string error = error_of([&] { CheckpointReader r(path); });
  EXPECT_NE(error.find("manifest.json does not match the checksum in COMMITTED"), std::string::npos) << error;
}

// A checkpoint of an older Cadre has a marker without the checksum: it still loads, and a
// shifted piece start in it is still caught, by the coverage check.
TEST(CheckpointFormat, AShiftedPieceStartIsCaughtWithoutTheChecksumToo) {
  cadre::test::TempDir dir("ckpt-shift");
  for (const auto& e : save_as_ranks(dir.path(), 3, 2, 0.f)) ASSERT_EQ(e, "");
  const std::string path = dir / "step-00000003";
  std::ofstream(path + "/COMMITTED") << "3\n";  // the marker as older versions wrote it
  EXPECT_EQ(error_of([&] { CheckpointReader r(path); }), "");
  edit_manifest(path, [](nlohmann::json& j) { j["tensors"]["a"]["pieces"][1]["start"] = 14; });  // was 15
  std::string error = error_of([&] { CheckpointReader r(path); });
  EXPECT_NE(error.find("tensor 'a'"), std::string::npos) << error;
  EXPECT_NE(error.find("stored twice"), std::string::npos) << error;
}

// Publishing never removes the checkpoint it just published, even when newer ones exist
// (keep counts it, and only older or other ones go).
TEST(CheckpointFormat, PruningNeverRemovesTheCheckpointJustPublished) {
  cadre::test::TempDir dir("ckpt-prune");
  for (int64_t step : {10, 20})
    for (const auto& e : save_as_ranks(dir.path(), step, 1, 0.f, /*keep=*/1)) ASSERT_EQ(e, "");
  ASSERT_FALSE(fs::exists(dir / "step-00000010"));
  for (const auto& e : save_as_ranks(dir.path(), 15, 1, 0.f, /*keep=*/1)) ASSERT_EQ(e, "");
  EXPECT_TRUE(fs::exists(dir / "step-00000015/COMMITTED"));
}
