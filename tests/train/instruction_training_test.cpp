// Fine-tuning on instruction and chat JSONL, end to end through `cadre data prepare` and
// `cadre train`:
// - each prepared window holds one sample's ids (its first seq_len + 1) with exactly the tokens
//   labelled_tokens learns as targets, the rest -100 (the prompt, and the padding even with
//   data.train_on_prompt); truncated and dropped samples are counted;
// - bad lines exit 2 naming file:line, before anything but the tokenizer is written;
// - packed windows hold every sample whole, and a packed run follows a padded one;
// - the loss is one mean over the learned targets of a whole step: one rank in 1, 2 or 4
//   micro-batches gives the same first loss (a mean of micro-batch means would not: their
//   counts differ), and 2 ranks follow one rank;
// - a resumed run equals an uninterrupted one;
// - a micro-batch or a step with nothing learned never makes the loss NaN;
// - train.epochs sizes the run from the data;
// - the masked loss equals transformers' loss with -100 labels on the same weights (label
//   python: tests/python/sft_loss_ref.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/file_util.h"
#include "data/loader.h"
#include "data/token_split.h"
#include "instruct/labelled_tokens.h"
#include "support/order_spread.h"
#include "support/process.h"
#include "support/rank_processes.h"
#include "support/run_metrics.h"
#include "support/tiny_dataset.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Words of the tiny corpus (support/corpus.cpp), which its tokenizer encodes in few tokens.
const std::vector<std::string> kWords = {"council", "nation", "people", "Congress", "government", "citizen",
                                         "treasury", "union", "secure", "protect", "public", "credit", "defense",
                                         "welfare", "liberty", "labor", "commerce", "lands", "year", "law"};

std::string words(size_t first, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? " " : "") + kWords[(first + i * 7) % kWords.size()];
  return out;
}

// 48 samples of every shape, answers of 1 to 7 words (so micro-batches learn different counts),
// then one whose answer is cut (truncated) and one whose prompt fills the window (dropped).
std::string sft_lines() {
  std::string out;
  for (size_t i = 0; i < 48; ++i) {
    const std::string q = words(i, 2 + i % 3), a = words(i + 5, 1 + i % 7);
    json j;
    if (i % 4 == 0) j = {{"messages", {{{"role", "user"}, {"content", q}}, {{"role", "assistant"}, {"content", a}}}}};
    if (i % 4 == 1) j = {{"instruction", q}, {"input", i % 8 == 1 ? words(i, 2) : ""}, {"output", a}};
    if (i % 4 == 2) j = {{"prompt", q + ":"}, {"completion", " " + a}};
    if (i % 4 == 3)
      j = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", q}},
                         {{"role", "assistant"}, {"content", a}}, {{"role", "user"}, {"content", "More?"}},
                         {{"role", "assistant"}, {"content", words(i, 2)}}}}};
    out += j.dump() + "\n";
    if (i == 20) out += "\n";  // blank lines are skipped
  }
  out += json({{"prompt", "Q:"}, {"completion", " " + words(0, 120)}}).dump() + "\n";
  out += json({{"prompt", words(1, 120)}, {"completion", " yes"}}).dump() + "\n";
  return out;
}

class InstructionTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("instruction-training");
    cadre::test::prepare_tiny_dataset(dir_->path(), 4, 20000);  // for its tokenizer.model (vocabulary 512)
    write(path("sft.jsonl"), sft_lines());
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string path(const std::string& name) { return *dir_ / name; }
  static void write(const std::string& file, const std::string& text) { std::ofstream(file) << text; }

  static cadre::test::RunResult prepare(const std::string& input, const std::string& out, std::vector<std::string> more = {}) {
    std::vector<std::string> argv = {CADRE_BIN, "data", "prepare", "--input", input, "--out", out,
                                     "--tokenizer", path("data/tokenizer.model"), "--seq-len", "64"};
    argv.insert(argv.end(), more.begin(), more.end());
    return cadre::test::run_process(argv, {}, 300);
  }

  static std::vector<std::string> train_command(const std::string& run, const std::string& data, int64_t batch,
                                                int64_t accum, std::vector<std::string> sets = {},
                                                const std::string& length = "train.steps=6") {
    return cadre::test::with_sets({CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                   "--set", "data.dir=" + data, "--set", "run.dir=" + path(run),
                                   "--set", "data.batch_size=" + std::to_string(batch),
                                   "--set", "optim.grad_accum_steps=" + std::to_string(accum),
                                   "--set", length, "--set", "train.threads=1",
                                   "--set", "train.eval_interval=3", "--set", "train.eval_batches=0"},
                                  sets);
  }

  static std::vector<double> losses(const std::string& run, const char* key = "loss") {
    return cadre::test::metric_values(path(run + "/metrics.jsonl"), key);
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* InstructionTraining::dir_ = nullptr;

using Sample = std::pair<std::vector<int>, std::vector<uint8_t>>;  // ids, learned

// Every window of a split as (ids, learned), read back through the loader: with
// train_on_prompt every id but the padding is a target, so the targets say where the sample
// ends; without it they say what is learned.
std::vector<Sample> read_windows(const std::string& data, cadre::Split split) {
  cadre::TokenLoader all(data, split, 0, /*train_on_prompt=*/true), answers(data, split, 0);
  const size_t per = static_cast<size_t>(all.seq_len() + 1);
  std::vector<Sample> out;
  std::vector<int64_t> tokens(per), labels_all(per), labels(per), tokens_again(per);
  for (uint64_t i = 0; i < all.num_samples(); ++i) {
    all.sample(i, tokens.data(), labels_all.data());
    answers.sample(i, tokens_again.data(), labels.data());
    Sample s;
    for (size_t k = 0; k < per && labels_all[k] != -100; ++k) {
      EXPECT_EQ(labels_all[k], tokens[k]);
      s.first.push_back(static_cast<int>(tokens[k]));
      s.second.push_back(labels[k] != -100);
      if (labels[k] != -100) {
        EXPECT_EQ(labels[k], tokens[k]);
      }
    }
    for (size_t k = s.first.size(); k < per; ++k) EXPECT_EQ(labels_all[k], -100) << "padding is never learned";
    out.push_back(s);
  }
  return out;
}

// Every document of a packed split as (ids, learned), read back through the loader and cut where
// the window's documents start. A document's first token is never a target; after it, with
// train_on_prompt, every token of a sample is and none of a padding tail, which only ends a
// window. Counts the windows and their padding tails.
struct PackedSplit {
  std::vector<Sample> documents;
  size_t windows = 0, padding_tails = 0;
  std::vector<size_t> used, first_length;  // per window: tokens of its documents, its first one's length
};
PackedSplit read_packed(const std::string& data, cadre::Split split) {
  cadre::TokenLoader all(data, split, 0, /*train_on_prompt=*/true), answers(data, split, 0);
  EXPECT_TRUE(all.packed());
  const size_t per = static_cast<size_t>(all.seq_len() + 1);
  std::vector<int64_t> tokens(per), labels_all(per), labels(per), tokens_again(per), starts, starts_again;
  PackedSplit out;
  for (uint64_t i = 0; i < all.num_samples(); ++i, ++out.windows) {
    all.sample(i, tokens.data(), labels_all.data(), &starts);
    answers.sample(i, tokens_again.data(), labels.data(), &starts_again);
    EXPECT_EQ(starts, starts_again);
    out.used.push_back(0);
    out.first_length.push_back(starts.size() > 1 ? static_cast<size_t>(starts[1]) : per);
    for (size_t d = 0; d < starts.size(); ++d) {
      const size_t first = static_cast<size_t>(starts[d]), end = d + 1 < starts.size() ? starts[d + 1] : per;
      Sample doc;
      size_t targets = 0;
      for (size_t k = first; k < end; ++k) {
        doc.first.push_back(static_cast<int>(tokens[k]));
        doc.second.push_back(labels[k] != -100);
        targets += labels_all[k] != -100;
        if (labels_all[k] != -100) {
          EXPECT_EQ(labels_all[k], tokens[k]);
        }
        if (labels[k] != -100) {
          EXPECT_EQ(labels[k], tokens[k]);
        }
      }
      EXPECT_EQ(labels_all[first], -100) << "window " << i << ": a document start is never learned";
      if (targets == 0) {
        EXPECT_EQ(end, per) << "window " << i << ": only a window's padding tail learns nothing";
        ++out.padding_tails;
      } else {
        EXPECT_EQ(targets, end - first - 1) << "window " << i << ": a sample's tokens after its first are targets";
        out.documents.push_back(doc);
        out.used.back() += end - first;
      }
    }
  }
  return out;
}

// What labelled_tokens gives each line of `jsonl`, cut to a window of 65 tokens; the lines
// without an answer left in it are counted as dropped, the cut ones as truncated.
std::vector<Sample> expected_samples(const std::string& jsonl, const std::string& tokenizer_dir, size_t& truncated,
                                     size_t& dropped) {
  const auto tokenizer = cadre::tokenizer_load(tokenizer_dir);
  const cadre::ChatTemplate chat = cadre::ChatTemplate::load("", *tokenizer);
  std::vector<Sample> want;
  truncated = dropped = 0;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    cadre::LabelledTokens t = cadre::labelled_tokens(cadre::instruction_sample_parse(line, "x"), *tokenizer, chat, false);
    const bool cut = t.ids.size() > 65;
    t.ids.resize(std::min<size_t>(t.ids.size(), 65));
    t.learn.resize(t.ids.size());
    if (std::count(t.learn.begin() + 1, t.learn.end(), 1) == 0) {
      ++dropped;
      continue;
    }
    truncated += cut;
    want.emplace_back(t.ids, t.learn);
  }
  std::sort(want.begin(), want.end());
  return want;
}

TEST_F(InstructionTraining, EachWindowHoldsOneSampleWithTheTokensItLearns) {
  const auto r = prepare(path("sft.jsonl"), path("sft"), {"--val-fraction", "0.1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  size_t truncated = 0, dropped = 0;
  const std::vector<Sample> want = expected_samples(path("sft.jsonl"), path("sft"), truncated, dropped);
  EXPECT_GE(truncated, 1u) << "the long answer";
  EXPECT_GE(dropped, 1u) << "the long prompt";
  EXPECT_GE(want.size(), 40u) << "most samples fit";
  EXPECT_NE(r.output.find(cadre::str("50 samples: ", truncated, " truncated to 65 tokens, ", dropped, " dropped")),
            std::string::npos) << r.output;
  std::vector<Sample> got = read_windows(path("sft"), cadre::Split::Train);
  const std::vector<Sample> val = read_windows(path("sft"), cadre::Split::Val);
  EXPECT_EQ(val.size(), static_cast<size_t>(double(want.size()) * 0.1));
  got.insert(got.end(), val.begin(), val.end());
  std::sort(got.begin(), got.end());
  EXPECT_TRUE(got == want) << "the windows do not hold the samples and their learned tokens";
}

// --packing documents: every kept sample is in exactly one window, whole, with the tokens it
// learns; windows end in at most one padding tail, and a window was closed only when the next
// sample did not fit in what it had left.
TEST_F(InstructionTraining, PackedWindowsHoldEveryDocumentWhole) {
  const auto r = prepare(path("sft.jsonl"), path("sft-packed"), {"--val-fraction", "0.1", "--packing", "documents"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t truncated = 0, dropped = 0;
  std::vector<Sample> want = expected_samples(path("sft.jsonl"), path("sft-packed"), truncated, dropped);
  for (auto& sample : want) sample.second[0] = 0;  // a first token is never a target
  std::sort(want.begin(), want.end());
  PackedSplit train = read_packed(path("sft-packed"), cadre::Split::Train);
  const PackedSplit val = read_packed(path("sft-packed"), cadre::Split::Val);
  EXPECT_EQ(val.documents.size(), static_cast<size_t>(double(want.size()) * 0.1));
  EXPECT_LE(train.padding_tails, train.windows);
  EXPECT_LT(train.windows + val.windows, want.size()) << "windows hold several samples";
  for (const PackedSplit* split : std::vector<const PackedSplit*>{&train, &val})
    for (size_t w = 0; w + 1 < split->windows; ++w)
      EXPECT_GT(split->used[w] + split->first_length[w + 1], 65u) << "window " << w << " had room for the next sample";
  train.documents.insert(train.documents.end(), val.documents.begin(), val.documents.end());
  std::sort(train.documents.begin(), train.documents.end());
  EXPECT_TRUE(train.documents == want) << "the packed windows do not hold the samples and their learned tokens";
  EXPECT_NE(r.output.find(cadre::str("samples packed into ", train.windows, " + ", val.windows, " windows")),
            std::string::npos) << r.output;
}

TEST_F(InstructionTraining, BadLinesExitTwoNamingTheLine) {
  auto expect_refused = [&](const std::string& name, const std::string& text, const std::string& needle,
                            std::vector<std::string> more = {}) {
    write(path(name), text);
    const std::string out = path("bad-" + name);
    const auto r = prepare(path(name), out, more);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "should name '" << needle << "':\n" << r.output;
    EXPECT_FALSE(fs::exists(out + "/manifest.json")) << name;
  };
  const std::string good = R"({"prompt": "a", "completion": " b"})" "\n";
  expect_refused("json.jsonl", good + "{\"prompt\": \n", "json.jsonl:2: not valid JSON");
  expect_refused("types.jsonl", good + good + R"({"prompt": 3, "completion": "x"})", "types.jsonl:3: field 'prompt'");
  expect_refused("missing.jsonl", R"({"instruction": "a"})", "missing.jsonl:1: field 'output' is missing");
  // Llama 2's template refuses roles that do not alternate (its raise_exception).
  expect_refused("roles.jsonl",
                 good + R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},)"
                        R"( {"role": "assistant", "content": "c"}]})",
                 "roles.jsonl:2: Conversation roles must alternate");
  expect_refused("packing.jsonl", good, "--packing 'tight': pad (one sample per window) or documents",
                 {"--packing", "tight"});
  write(path("plain.txt"), "some text\n");
  const auto mixed = cadre::test::run_process({CADRE_BIN, "data", "prepare", "--input", path("packing.jsonl"), "--input",
                                               path("plain.txt"), "--out", path("bad-mixed"), "--tokenizer",
                                               path("data/tokenizer.model")}, {}, 60);
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("plain.txt': expected a .jsonl file"), std::string::npos) << mixed.output;
}

// One rank's first loss (before any update: a function of the normalisation alone) is the same
// in 1, 2 or 4 micro-batches to within float32 rounding of the per-micro-batch means (each a
// float32 value; 1e-5 relative is over 100 of its ulps), where a mean of micro-batch means
// would be off by the spread of the micro-batches' learned counts. Two ranks follow one rank
// within its order spread (support/order_spread.h), training and validation.
TEST_F(InstructionTraining, TheLossIsOneMeanOverTheStepAtAnyLayout) {
  ASSERT_EQ(prepare(path("sft.jsonl"), path("sft-layouts"), {"--val-fraction", "0.1"}).exit_code, 0);
  const std::string data = path("sft-layouts");
  auto run = [&](const std::string& name, int64_t batch, int64_t accum) {
    const auto r = cadre::test::run_process(train_command(name, data, batch, accum), {}, 300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  };
  run("one", 8, 1);
  run("one-in-2", 4, 2);
  run("one-in-4", 2, 4);
  const std::vector<double> one = losses("one");
  ASSERT_EQ(one.size(), 6u);
  for (const char* variant : {"one-in-2", "one-in-4"}) {
    ASSERT_EQ(losses(variant).size(), 6u) << variant;
    EXPECT_NEAR(losses(variant)[0], one[0], 1e-5 * one[0]) << variant;
  }
  auto results = cadre::testing::run_ranks(2, train_command("two", data, 2, 2, {"parallel.strategy=FULL_SHARD"}));
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
  ASSERT_EQ(losses("two").size(), 6u);
  EXPECT_NEAR(losses("two")[0], one[0], 1e-5 * one[0]);
  cadre::test::OrderSpread(one, {losses("one-in-2"), losses("one-in-4")}).expect_follows(losses("two"), "2 ranks");
  ASSERT_EQ(losses("one", "val_loss").size(), 2u);
  cadre::test::OrderSpread(losses("one", "val_loss"), {losses("one-in-2", "val_loss"), losses("one-in-4", "val_loss")})
      .expect_follows(losses("two", "val_loss"), "2 ranks, validation");
}

// A packed run learns what a padded one does. With the whole train split as each step (every
// step the same sums, over documents packed or one per window), the losses of packed runs (one
// rank; two FULL_SHARD ranks with activation checkpointing, which recomputes the documents'
// attention; two tensor-parallel ranks, each attending with its heads) follow the padded run's within the order spread of the padded run split into
// micro-batches two other ways (support/order_spread.h), training and validation. Attention
// across documents would move the loss by whole terms. The set grows by short samples until two
// ranks can share the packed split and the padded one splits two ways.
TEST_F(InstructionTraining, PackedTrainingFollowsPadded) {
  const std::string pad = path("sft-pad"), pack = path("sft-pack");
  int64_t padded = 0, packed = 0;
  std::vector<int64_t> splits;  // micro-batches the padded split divides into
  std::string lines = sft_lines();
  for (int extra = 0; extra < 24 && (packed % 2 != 0 || splits.size() < 2 || packed == 0); ++extra) {
    write(path("sft-grown.jsonl"), lines);
    ASSERT_EQ(prepare(path("sft-grown.jsonl"), pad, {"--val-fraction", "0.1"}).exit_code, 0);
    ASSERT_EQ(prepare(path("sft-grown.jsonl"), pack, {"--val-fraction", "0.1", "--packing", "documents"}).exit_code, 0);
    padded = static_cast<int64_t>(cadre::manifest_read(pad).train.at(0).samples);
    packed = static_cast<int64_t>(cadre::manifest_read(pack).train.at(0).samples);
    splits.clear();
    for (int64_t accum = 2; accum <= 12 && splits.size() < 2; ++accum)
      if (padded % accum == 0) splits.push_back(accum);
    lines += json({{"prompt", "Q" + std::to_string(extra) + ":"}, {"completion", " yes"}}).dump() + "\n";
  }
  ASSERT_TRUE(packed % 2 == 0 && splits.size() == 2) << padded << " padded and " << packed << " packed windows";
  auto run = [&](const std::string& name, const std::string& data, int64_t batch, int64_t accum) {
    const auto r = cadre::test::run_process(train_command(name, data, batch, accum, {}, "train.steps=3"), {}, 300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  };
  run("pad-1", pad, padded, 1);
  run("pad-a", pad, padded / splits[0], splits[0]);
  run("pad-b", pad, padded / splits[1], splits[1]);
  run("pack-1", pack, packed, 1);
  auto results = cadre::testing::run_ranks(
      2, train_command("pack-2", pack, packed / 2, 1,
                       {"parallel.strategy=FULL_SHARD", "parallel.activation_checkpointing=true"}, "train.steps=3"));
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
  results = cadre::testing::run_ranks(2, train_command("pack-tp", pack, packed, 1, {"parallel.tp_size=2"}, "train.steps=3"));
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
  for (const char* key : {"loss", "val_loss"}) {
    const cadre::test::OrderSpread spread(losses("pad-1", key), {losses("pad-a", key), losses("pad-b", key)});
    spread.expect_follows(losses("pack-1", key), cadre::str("packed, ", key));
    spread.expect_follows(losses("pack-2", key), cadre::str("packed on 2 ranks with checkpointing, ", key));
    spread.expect_follows(losses("pack-tp", key), cadre::str("packed, tensor parallel over 2 ranks, ", key));
  }
}

// A run stopped after step 3 (a checkpoint, the loader's position in it) and resumed takes the
// same windows in the same order and logs the same losses, bit for bit, as one that was not
// stopped: 45 windows in global batches of 8, so the resume falls inside the first epoch and
// the run goes on into the second.
TEST_F(InstructionTraining, AResumedRunEqualsAnUninterruptedOne) {
  ASSERT_EQ(prepare(path("sft.jsonl"), path("sft-resume"), {"--val-fraction", "0.1"}).exit_code, 0);
  const std::string data = path("sft-resume");
  auto r = cadre::test::run_process(train_command("whole", data, 4, 2, {"train.steps=9"}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = cadre::test::run_process(train_command("halves", data, 4, 2, {"train.steps=9", "train.stop_at=3"}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(losses("halves").size(), 3u);
  r = cadre::test::run_process(train_command("halves", data, 4, 2, {"train.steps=9"}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(losses("halves"), losses("whole"));
  EXPECT_EQ(losses("halves", "val_loss"), losses("whole", "val_loss"));
}

// A dataset written here: sample 0 learns nothing, sample 1 learns every next token. One
// sample a step: the steps that draw sample 0 log 0; two a step (in two micro-batches): every
// step logs sample 1's loss; never NaN, and training goes on.
TEST_F(InstructionTraining, NothingLearnedNeverGivesNaN) {
  const std::string data = path("nothing-learned");
  fs::create_directories(data);
  fs::copy_file(path("data/tokenizer.model"), data + "/tokenizer.model");
  cadre::DatasetManifest m = cadre::manifest_read(path("data"));
  std::vector<uint32_t> tokens(2 * 65), labels(2 * 65);
  const cadre::LabelCodes codes = cadre::label_codes(cadre::label_bytes(m.vocab_size));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = 3 + static_cast<uint32_t>((i * 37) % 500);
    labels[i] = i < 65 ? (i % 2 ? codes.prompt : codes.padding) : tokens[i];
  }
  m.train = cadre::token_split_write(data, "train", tokens.data(), 2, 65, 100, m.token_bytes);
  m.train_labels = cadre::token_split_write(data, "train_labels", labels.data(), 2, 65, 100, cadre::label_bytes(m.vocab_size));
  m.val = cadre::token_split_write(data, "val", tokens.data() + 65, 1, 65, 100, m.token_bytes);
  m.val_labels = cadre::token_split_write(data, "val_labels", labels.data() + 65, 1, 65, 100, cadre::label_bytes(m.vocab_size));
  cadre::manifest_write(data, m);

  auto r = cadre::test::run_process(train_command("nothing-1", data, 1, 1, {"train.steps=8"}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> single = losses("nothing-1");
  ASSERT_EQ(single.size(), 8u);
  EXPECT_EQ(std::count(single.begin(), single.end(), 0.0), 4) << "each sample drawn once an epoch";
  for (double l : single) EXPECT_TRUE(std::isfinite(l));
  r = cadre::test::run_process(train_command("nothing-2", data, 1, 2, {"train.steps=2"}), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (double l : losses("nothing-2")) EXPECT_GT(l, 1.0) << "sample 1's loss alone";
}

// train.epochs sizes the run from the data (2 epochs of N windows in global batches of 8 are
// ceil(2N / 8) steps); a --set of epochs replaces the file's steps, and one source giving both
// is refused.
TEST_F(InstructionTraining, EpochsSizeTheRun) {
  ASSERT_EQ(prepare(path("sft.jsonl"), path("sft-epochs"), {"--val-fraction", "0.1"}).exit_code, 0);
  const uint64_t samples = cadre::manifest_read(path("sft-epochs")).train.at(0).samples;
  const uint64_t steps = (2 * samples + 7) / 8;
  auto r = cadre::test::run_process(train_command("epochs", path("sft-epochs"), 4, 2, {}, "train.epochs=2"), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(losses("epochs").size(), steps);
  EXPECT_NE(r.output.find(cadre::str("2 epochs of ", samples, " samples in global batches of 8: ", steps, " steps")),
            std::string::npos) << r.output;
  r = cadre::test::run_process(train_command("epochs-both", path("sft-epochs"), 4, 2, {"train.steps=3"}, "train.epochs=2"),
                               {}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.steps and train.epochs both size the run"), std::string::npos) << r.output;
  // The recipe (5 epochs) plans its memory without data.
  r = cadre::test::run_process({CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/llama2_7b_sft.yaml",
                                "--dry-run", "--world-size", "8"}, {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// transformers' LlamaForCausalLM with labels = -100 where Cadre learns nothing, on the folder
// Cadre fine-tunes from (random bf16 weights, widened to float32 on both sides), over every
// window of the train split in one batch: its loss (the mean over the learned targets) and
// Cadre's first loss (the whole split as one step) agree to within 8x transformers' own float32
// error against its float64 run (two float32 implementations of the same sums, in other orders),
// floored at 1e-5 relative; learning the prompt or a mean of means would be off by far more.
// Packed: transformers gets each document alone (sft_loss_ref.py cuts the windows back into
// documents), Cadre the packed windows.
TEST_F(InstructionTraining, MaskedLossEqualsTransformers) {
  const std::string hf = path("hf");
  auto py = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), CADRE_VENV_PYTHON);
    const auto r = cadre::test::run_process(argv, {}, 300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  py({CADRE_SOURCE_DIR "/tests/python/hf_random_folder.py", hf, "64", "2", "4", "2", "192", "512", "200MB"});
  py({CADRE_SOURCE_DIR "/tests/python/sft_loss_ref.py", "tokenizer", hf});
  // Packed into the folder's whole context (256), where Llama 3.1's template (some 50 tokens a
  // sample here) leaves several samples per window.
  for (const std::string packing : {"pad", "documents"}) {
    const std::string data = path("sft-hf-" + packing), run = "hf-run-" + packing;
    const auto prep = cadre::test::run_process({CADRE_BIN, "data", "prepare", "--input", path("sft.jsonl"), "--out", data,
                                                "--tokenizer", hf, "--seq-len", packing == "pad" ? "64" : "256",
                                                "--val-fraction", "0", "--packing", packing},
                                               {}, 300);
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
    const uint64_t windows = cadre::manifest_read(data).train.at(0).samples;
    if (packing == "documents") {
      EXPECT_LT(2 * windows, cadre::manifest_read(data).documents) << "packing holds several samples a window";
    }
    const auto r = cadre::test::run_process(
        train_command(run, data, static_cast<int64_t>(windows), 1,
                      {"train.steps=1", "train.init_from=" + hf, "model.ffn_dim=192", "train.eval_interval=0",
                       packing == "pad" ? "model.max_seq_len=64" : "model.max_seq_len=256"}),
        {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double cadre_loss = losses(run).at(0);
    const std::string out = py({CADRE_SOURCE_DIR "/tests/python/sft_loss_ref.py", "loss", hf, data});
    const json ref = json::parse(out.substr(out.rfind('{')));
    const double hf64 = ref["loss64"], hf32 = ref["loss32"];
    const double bound = std::max(8 * std::abs(hf32 - hf64), 1e-5 * hf64);
    std::printf("[masked loss, %s] cadre %.9f, transformers float64 %.9f (float32 %.9f), %d learned targets in %llu "
                "windows; |diff| %.3g, bound %.3g\n",
                packing.c_str(), cadre_loss, hf64, hf32, ref["learned"].get<int>(),
                static_cast<unsigned long long>(windows), std::abs(cadre_loss - hf64), bound);
    EXPECT_NEAR(cadre_loss, hf64, bound) << packing << ": transformers float32 " << hf32 << ", learned targets "
                                         << ref["learned"];
  }
}

}  // namespace
