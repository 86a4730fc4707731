// Cadre's flight recorder in PyTorch's dump format (src/obs/flight_recorder_torch.h), read by
// PyTorch's own analyzer (torch.distributed.flight_recorder.fr_trace, the `torchfrtrace`
// command, from the project venv's torch: CADRE_VENV_PYTHON). Three ranks' real rings record a
// mix of collectives (all_reduce, all_gather, reduce_scatter, broadcast, barrier, and ops of a
// sub-group); a hang is staged by having ranks 0 and 2 start an op rank 1 never enters. Cadre's
// own diagnosis (hang_diagnose) and the analyzer must name the same op (sequence number) and
// the same missing rank, also when the rings have wrapped at different points; and when every
// rank entered the stalled op, neither names a missing rank.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/file_util.h"
#include "obs/flight_recorder.h"
#include "obs/flight_recorder_torch.h"
#include "obs/hang_diagnosis.h"
#include "support/process.h"

namespace {

using cadre::obs::CollectiveInfo;
using cadre::obs::FlightRecorder;

constexpr int kRanks = 3;
const char* const kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier"};

// Records one op on `rank`'s ring: issued, started with `seq`, finished unless `stall`.
void record(FlightRecorder& fr, int rank, const char* group, int size, int64_t seq, const char* op, bool stall) {
  CollectiveInfo info;
  info.group = group;
  info.group_rank = rank % size;
  info.group_size = size;
  info.op = op;
  info.detail = std::string(op) == "all_reduce" ? "sum" : "";
  info.dtype = std::string(op) == "barrier" ? "" : "Float";
  info.numel = std::string(op) == "barrier" ? 1 : 999;  // reduce_scatter's input divides by 3
  info.bytes = info.numel * 4;
  const uint64_t id = fr.issued(info);
  fr.started(id, seq);
  if (!stall) fr.finished(id, true);
}

// Each rank's ring after `world_ops` finished world-group ops (and a 2-rank sub-group op every
// 4th, on ranks 0 and 1), then: ranks in `enter` start world op `world_ops` and stay in it;
// rank 1 has also issued an op it never started. `capacity` small enough wraps the rings.
std::vector<std::unique_ptr<FlightRecorder>> stage(size_t capacity, int64_t world_ops, const std::set<int>& enter) {
  std::vector<std::unique_ptr<FlightRecorder>> rings;
  for (int r = 0; r < kRanks; ++r) {
    auto fr = std::make_unique<FlightRecorder>(capacity);
    fr->set_rank(r);
    int64_t sub_seq = 0;
    for (int64_t s = 0; s < world_ops; ++s) {
      record(*fr, r, "world", kRanks, s, kOps[s % 5], false);
      if (s % 4 == 0 && r < 2) record(*fr, r, "dp0", 2, sub_seq++, "all_reduce", false);
    }
    if (enter.count(r)) record(*fr, r, "world", kRanks, world_ops, "all_reduce", true);
    if (r == 1) {
      CollectiveInfo info;
      info.op = "all_reduce";
      info.group_size = kRanks;
      fr->issued(info);  // queued behind the stop: no sequence number
    }
    rings.push_back(std::move(fr));
  }
  return rings;
}

struct Outcome {
  cadre::obs::HangDiagnosis cadre;
  nlohmann::json torch;
};

Outcome analyse(const std::vector<std::unique_ptr<FlightRecorder>>& rings, const std::string& dir) {
  std::vector<cadre::obs::RankEvidence> evidence;
  for (int r = 0; r < kRanks; ++r) {
    cadre::obs::RankEvidence e;
    e.rank = r;
    e.has_recorder = true;
    e.recorder = rings[r]->state();
    cadre::file_write_atomic(cadre::obs::flight_recorder_torch_dump_path(dir, r),
                             cadre::obs::flight_recorder_torch_dump(e.recorder));
    // The JSON dump beside it, as in a run directory: the analyzer must skip it.
    cadre::file_write_atomic(dir + "/rank_" + std::to_string(r) + ".json",
                             cadre::obs::flight_recorder_dump_json(e.recorder, "test", "test"));
    evidence.push_back(std::move(e));
  }
  Outcome o;
  o.cadre = cadre::obs::hang_diagnose(evidence, kRanks, cadre::obs::wall_clock_ns());
  auto py = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/fr_trace_check.py", dir});
  EXPECT_EQ(py.exit_code, 0) << py.output;
  o.torch = nlohmann::json::parse(py.output.substr(py.output.find('{')), nullptr, false);
  EXPECT_TRUE(o.torch.is_object()) << py.output;
  EXPECT_EQ(o.torch.value("exit_code", -1), 0) << py.output;
  EXPECT_EQ(o.torch["ranks"], nlohmann::json({0, 1, 2})) << py.output;
  return o;
}

void expect_same_rank_named(size_t capacity, int64_t world_ops) {
  cadre::test::TempDir dir("torch-fr");
  auto rings = stage(capacity, world_ops, {0, 2});
  Outcome o = analyse(rings, dir.path());
  ASSERT_TRUE(o.cadre.found) << o.cadre.message;
  EXPECT_EQ(o.cadre.missing, std::vector<int>{1}) << o.cadre.message;
  EXPECT_EQ(o.cadre.seq, world_ops) << o.cadre.message;
  const auto& unmatched = o.torch["unmatched"];
  ASSERT_FALSE(unmatched.empty()) << o.torch.dump(1);
  // The analyzer's first unmatched collective is the stalled op, with the same missing rank.
  EXPECT_EQ(unmatched[0]["seq"], o.cadre.seq) << o.torch.dump(1);
  EXPECT_EQ(unmatched[0]["missing_ranks"].get<std::vector<int>>(), o.cadre.missing) << o.torch.dump(1);
  EXPECT_EQ(unmatched[0]["expected_ranks"], nlohmann::json({0, 1, 2})) << o.torch.dump(1);
  EXPECT_EQ(unmatched[0]["name"], "nccl:all_reduce");
  EXPECT_NE(o.torch["log"].get<std::string>().find("missing ranks: {1}"), std::string::npos) << o.torch["log"];
  // Every op before it matched on all ranks: the sizes and dtypes of each kind agree.
  EXPECT_GE(o.torch["matched"].get<int>(), 1);
  std::printf("[torch fr] capacity %zu: Cadre: %s\n[torch fr] torch %s fr_trace: %d collectives matched, first "
              "unmatched #%lld %s, missing ranks %s\n",
              capacity, o.cadre.message.c_str(), o.torch["torch"].get<std::string>().c_str(),
              o.torch["matched"].get<int>(), static_cast<long long>(unmatched[0]["seq"].get<int64_t>()),
              unmatched[0]["name"].get<std::string>().c_str(), unmatched[0]["missing_ranks"].dump().c_str());
}

}  // namespace

TEST(TorchFlightRecorder, AnalyzerNamesTheRankCadreNames) { expect_same_rank_named(2000, 23); }

// Rings of 8 entries hold different windows on each rank (rank 2 has no sub-group ops, rank 1
// an extra unstarted one): the analyzer aligns them by the sequence numbers written as record ids.
TEST(TorchFlightRecorder, AnalyzerNamesTheRankCadreNamesAfterTheRingsWrapped) { expect_same_rank_named(8, 23); }

TEST(TorchFlightRecorder, WhenEveryRankEnteredTheOpNeitherNamesAMissingRank) {
  cadre::test::TempDir dir("torch-fr-all");
  auto rings = stage(2000, 11, {0, 1, 2});
  Outcome o = analyse(rings, dir.path());
  ASSERT_TRUE(o.cadre.found) << o.cadre.message;
  EXPECT_TRUE(o.cadre.missing.empty()) << o.cadre.message;
  for (const auto& c : o.torch["unmatched"]) EXPECT_TRUE(c["missing_ranks"].empty()) << o.torch.dump(1);
  EXPECT_EQ(o.torch["matched"].get<int>(), 12) << o.torch.dump(1);  // 11 finished ops and the stalled one
}

TEST(TorchFlightRecorder, ADumpWithoutARankIsRefusedNamingThePid) {
  FlightRecorder fr(8);
  try {
    cadre::obs::flight_recorder_torch_dump(fr.state());
    ADD_FAILURE() << "dumped without a rank";
  } catch (const cadre::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the rank"), std::string::npos) << e.what();
  }
}
