// Checkpoint staging through host buffers (the path a GPU's tensors take; here CPU tensors sent
// that way): the staged pieces are filled only when the writer finishes the snapshot, from the
// values the tensors had at staging; the buffer is freed then (nothing stays resident between
// saves) or, for a save never written, when the snapshot is cleared; and a whole training
// state staged this way, or borrowed where it lives (a run's last checkpoint: no copy), writes
// the same checkpoint, byte for byte, as copied in place.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_saver.h"
#include "ckpt/host_staging.h"
#include "ckpt/manifest.h"
#include "core/error.h"
#include "optim/adamw.h"
#include "shard/fully_shard.h"
#include "shard/module_hooks.h"
#include "shard/user_net.h"
#include "support/process.h"
#include "train/checkpointing.h"

namespace {

using cadre::HostStaging;
using cadre::Snapshot;

// Stages `t` ([6, 5]) as two pieces, rows 0-1 and rows 2-5, through `staging`.
void stage_two_pieces(Snapshot& snap, HostStaging& staging, const at::Tensor& t) {
  const std::vector<int64_t> shape{6, 5};
  snap.add({"a", "float32", shape, {{0, 0}, {2, 5}}, 0});
  snap.add({"a", "float32", shape, {{2, 0}, {4, 5}}, 0});
  staging.add(t, {0, 1});
}

std::vector<float> piece_values(const Snapshot& snap, size_t k) {
  const cadre::SnapshotPiece& p = snap.pieces()[k];
  std::vector<float> out(static_cast<size_t>(p.box.numel()));
  std::memcpy(out.data(), snap.data(p), out.size() * sizeof(float));
  return out;
}

TEST(HostStaging, FillsThePiecesAtFinishWithTheValuesAtStartAndFreesTheBuffer) {
  at::Tensor t = at::arange(30, at::kFloat).view({6, 5});
  Snapshot snap;
  auto staging = std::make_shared<HostStaging>();
  stage_two_pieces(snap, *staging, t);
  EXPECT_EQ(staging->bytes_held(), 0u);
  staging->start();
  EXPECT_GE(staging->bytes_held(), 30 * sizeof(float));
  snap.defer([staging](Snapshot& s) { staging->finish(s); });
  t.fill_(-1);  // training goes on after staging
  std::memset(snap.data(snap.pieces()[0]), 0x7f, 10 * sizeof(float));
  snap.finish();
  EXPECT_EQ(staging->bytes_held(), 0u);
  std::vector<float> first = piece_values(snap, 0), rest = piece_values(snap, 1);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], float(i));
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], float(10 + i));
  // The fills ran once: a second finish() leaves the bytes alone.
  std::memset(snap.data(snap.pieces()[0]), 0x7f, 10 * sizeof(float));
  snap.finish();
  EXPECT_NE(piece_values(snap, 0)[0], 0.0f);
}

TEST(HostStaging, ASnapshotClearedUnwrittenFreesTheBuffer) {
  Snapshot snap;
  auto staging = std::make_shared<HostStaging>();
  std::weak_ptr<HostStaging> alive = staging;
  stage_two_pieces(snap, *staging, at::ones({6, 5}));
  staging->start();
  snap.defer([staging](Snapshot& s) { staging->finish(s); });
  staging.reset();
  EXPECT_FALSE(alive.expired());
  snap.clear();
  EXPECT_TRUE(alive.expired());
}

TEST(HostStaging, PiecesThatDoNotCoverTheTensorAreAnError) {
  Snapshot snap;
  HostStaging staging;
  snap.add({"a", "float32", {6, 5}, {{0, 0}, {2, 5}}, 0});
  staging.add(at::ones({6, 5}), {0});
  staging.start();
  try {
    staging.finish(snap);
    FAIL() << "finish() accepted pieces covering 10 of 30 elements";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("leave 80 of its bytes out"), std::string::npos) << e.what();
  }
}

// Every tensor of two checkpoints, compared as bytes.
void expect_same_checkpoints(const std::string& a_dir, const std::string& b_dir) {
  cadre::CheckpointReader a(a_dir), b(b_dir);
  ASSERT_EQ(a.manifest().tensors.size(), b.manifest().tensors.size());
  for (const auto& [name, record] : a.manifest().tensors) {
    ASSERT_TRUE(b.has(name)) << name;
    const size_t bytes = static_cast<size_t>(record.numel() * cadre::dtype_element_size(record.dtype));
    std::vector<char> x(bytes), y(bytes);
    a.read(name, 0, record.numel(), x.data());
    b.read(name, 0, record.numel(), y.data());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), bytes), 0) << name;
  }
}

TEST(HostStaging, TrainStateStagedThroughBuffersOrBorrowedWritesTheSameCheckpoint) {
  cadre::test::TempDir dir("host-staging");
  auto net = std::make_shared<usernet::Net>();
  net->init(3);
  cadre::FullyShardOptions options;  // one rank: FULL_SHARD without a group
  for (auto* unit : net->units()) cadre::fully_shard(*unit, options);
  cadre::FSDPModule fsdp = cadre::fully_shard(*net, options);
  std::vector<at::Tensor> params = fsdp.parameters();
  cadre::AdamW adamw(params, std::vector<bool>(params.size(), true), {});
  auto [x, y] = usernet::batch(1, 0, 8);
  at::cross_entropy_loss(cadre::call(net.get(), x), y).backward();
  adamw.step(1e-2);  // moments and BatchNorm statistics are not zero
  auto alone = [&](bool ok) { return ok; };
  int64_t state_bytes = 0;
  for (const auto& p : params) state_bytes += 3 * p.nbytes();  // the shard and AdamW's two moments
  using cadre::CpuStaging;
  for (CpuStaging how : {CpuStaging::Copy, CpuStaging::Queue, CpuStaging::Borrow}) {
    const std::string tag = how == CpuStaging::Copy ? "in_place" : how == CpuStaging::Queue ? "buffers" : "borrowed";
    const std::string sub = (std::filesystem::path(dir.path()) / tag).string();
    cadre::CheckpointSaver saver({sub, 0, 1, 3, /*async=*/true}, alone);
    Snapshot& snap = saver.stage();
    cadre::stage_train_state(snap, fsdp, adamw, 0, how);
    // Borrowed: only the buffers (BatchNorm's statistics) and the RNG state are copied.
    if (how == CpuStaging::Borrow) EXPECT_LT(snap.capacity(), static_cast<size_t>(state_bytes) / 10) << tag;
    else EXPECT_GE(snap.size(), static_cast<size_t>(state_bytes)) << tag;
    cadre::CheckpointManifest header;
    header.step = 1;
    header.world_size = 1;
    header.strategy = "FULL_SHARD";
    header.state = {{"data_position", 8}, {"optimizer_steps", 1}};
    header.config_yaml = "model: {}\n";
    saver.submit(header);
    saver.wait();
  }
  const auto written = [&](const std::string& tag) {
    return (std::filesystem::path(dir.path()) / tag / cadre::checkpoint_name(1)).string();
  };
  expect_same_checkpoints(written("in_place"), written("buffers"));
  expect_same_checkpoints(written("in_place"), written("borrowed"));
}

}  // namespace
