// Dataset preparation and the loader: static shapes, determinism, exact resume, rank slicing,
// epochs, and clear errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/sentencepiece_tokenizer.h"
#include "support/corpus.h"
#include "support/process.h"

using namespace cadre;

class Prepared : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("prepare");
    test::write_corpus(*dir_ / "text", 6, 20000);
    PrepareOptions opt;
    opt.inputs = {*dir_ / "text"};
    opt.out = *dir_ / "data";
    opt.vocab_size = 300;
    opt.seq_len = 32;
    opt.val_fraction = 0.05;
    opt.shard_samples = 500;  // several shards
    manifest_ = new DatasetManifest(dataset_prepare(opt));
  }
  static void TearDownTestSuite() {
    delete manifest_;
    delete dir_;
  }
  static std::string data() { return *dir_ / "data"; }
  static test::TempDir* dir_;
  static DatasetManifest* manifest_;
};
test::TempDir* Prepared::dir_ = nullptr;
DatasetManifest* Prepared::manifest_ = nullptr;

TEST_F(Prepared, ManifestDescribesStaticShapes) {
  const auto& m = *manifest_;
  EXPECT_EQ(m.seq_len, 32);
  EXPECT_EQ(m.vocab_size, 300);
  EXPECT_EQ(m.documents, 6u);
  EXPECT_GT(m.train.size(), 1u);
  ASSERT_FALSE(m.val.empty());
  uint64_t samples = 0;
  for (const auto& s : m.train) samples += s.samples;
  for (const auto& s : m.val) samples += s.samples;
  EXPECT_EQ(samples, m.tokens / 33);  // whole samples of seq_len + 1, tail dropped

  TokenLoader val(data(), Split::Val, 0);
  std::vector<int64_t> sample(33);
  for (uint64_t i = 0; i < val.num_samples(); ++i) {
    val.sample(i, sample.data());
    for (int64_t t : sample) ASSERT_TRUE(t >= 0 && t < m.vocab_size);
  }
}

TEST_F(Prepared, TokenizerRoundTripsText) {
  SentencePieceTokenizer tok(data() + "/tokenizer.model");
  std::string text = "The council must secure the public credit without delay.";
  auto ids = tok.encode(text);
  EXPECT_LT(ids.size(), text.size());  // merges happened
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
}

TEST_F(Prepared, SameSeedSameShardsDifferentSeedDifferent) {
  PrepareOptions opt;
  opt.inputs = {*dir_ / "text"};
  opt.tokenizer = data() + "/tokenizer.model";
  opt.seq_len = 32;
  opt.val_fraction = 0.05;
  opt.shard_samples = 500;
  opt.out = *dir_ / "again";
  DatasetManifest again = dataset_prepare(opt);
  ASSERT_EQ(again.train.size(), manifest_->train.size());
  for (size_t i = 0; i < again.train.size(); ++i) EXPECT_EQ(again.train[i].checksum, manifest_->train[i].checksum);
  opt.seed = 99;
  opt.out = *dir_ / "other";
  DatasetManifest other = dataset_prepare(opt);
  auto checksums = [](const DatasetManifest& m) {
    std::vector<uint64_t> out;
    for (const auto& s : m.train) out.push_back(s.checksum);
    return out;
  };
  EXPECT_NE(checksums(other), checksums(*manifest_));  // documents in another order
}

TEST_F(Prepared, LoaderIsDeterministicAndResumesExactly) {
  TokenLoader a(data(), Split::Train, 5), b(data(), Split::Train, 5), c(data(), Split::Train, 6);
  std::vector<int64_t> ba(4 * 33), bb(4 * 33), bc(4 * 33);
  for (int i = 0; i < 3; ++i) {
    a.next(4, 0, 4, ba.data());
    b.next(4, 0, 4, bb.data());
    c.next(4, 0, 4, bc.data());
    EXPECT_EQ(ba, bb);
  }
  EXPECT_NE(ba, bc);  // another seed, another order

  // Resume: a fresh loader set to a's position continues exactly as a does.
  TokenLoader resumed(data(), Split::Train, 5);
  resumed.set_position(a.position());
  for (int i = 0; i < 5; ++i) {
    a.next(4, 0, 4, ba.data());
    resumed.next(4, 0, 4, bb.data());
    EXPECT_EQ(ba, bb) << "batch " << i << " after resume";
  }
}

TEST_F(Prepared, RankSlicesPartitionTheGlobalBatch) {
  // Two ranks taking halves of each global batch see what one rank sees taking all of it.
  TokenLoader one(data(), Split::Train, 3), r0(data(), Split::Train, 3), r1(data(), Split::Train, 3);
  std::vector<int64_t> all(6 * 33), half0(3 * 33), half1(3 * 33);
  for (int i = 0; i < 4; ++i) {
    one.next(6, 0, 6, all.data());
    r0.next(6, 0, 3, half0.data());
    r1.next(6, 3, 3, half1.data());
    EXPECT_TRUE(std::equal(half0.begin(), half0.end(), all.begin()));
    EXPECT_TRUE(std::equal(half1.begin(), half1.end(), all.begin() + 3 * 33));
  }
  EXPECT_EQ(one.position(), r0.position());
}

TEST_F(Prepared, EachEpochVisitsEverySampleOnce) {
  TokenLoader loader(data(), Split::Train, 11);
  const uint64_t n = loader.num_samples();
  std::vector<int64_t> s(33);
  std::vector<std::vector<int64_t>> order1, order2;
  for (uint64_t i = 0; i < n; ++i) {
    loader.next(1, 0, 1, s.data());
    order1.push_back(s);
  }
  for (uint64_t i = 0; i < n; ++i) {
    loader.next(1, 0, 1, s.data());
    order2.push_back(s);
  }
  std::vector<std::vector<int64_t>> in_file_order(n, std::vector<int64_t>(33));
  for (uint64_t i = 0; i < n; ++i) loader.sample(i, in_file_order[i].data());
  auto sorted1 = order1, sorted2 = order2;
  std::sort(sorted1.begin(), sorted1.end());
  std::sort(sorted2.begin(), sorted2.end());
  std::sort(in_file_order.begin(), in_file_order.end());
  EXPECT_EQ(sorted1, in_file_order);  // every sample exactly once per epoch
  EXPECT_EQ(sorted2, in_file_order);
  EXPECT_NE(order1, order2);    // in a different order
}

TEST(PrepareErrors, BadInputsNameTheProblem) {
  test::TempDir dir("prepare-bad");
  auto message = [&](PrepareOptions opt) {
    try {
      dataset_prepare(opt);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  PrepareOptions opt;
  opt.out = dir / "out";
  opt.inputs = {dir / "nope"};
  EXPECT_NE(message(opt).find("nope"), std::string::npos);

  std::filesystem::create_directories(dir / "empty");
  opt.inputs = {dir / "empty"};
  EXPECT_NE(message(opt).find("no .txt"), std::string::npos);

  test::write_corpus(dir / "small", 1, 3000);
  opt.inputs = {dir / "small"};
  opt.vocab_size = 100;
  EXPECT_NE(message(opt).find("--vocab-size"), std::string::npos);
  opt.vocab_size = 300;
  opt.seq_len = 100000;
  EXPECT_NE(message(opt).find("corpus too small"), std::string::npos);
  opt.seq_len = 32;
  opt.val_fraction = 1.5;
  EXPECT_NE(message(opt).find("--val-fraction"), std::string::npos);
}
