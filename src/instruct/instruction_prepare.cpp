// Instruction JSONL -> labelled token shards (see instruction_prepare.h).
#include "instruct/instruction_prepare.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/permutation.h"
#include "data/prepare.h"
#include "data/token_split.h"
#include "data/tokenizer_identity.h"
#include "instruct/labelled_tokens.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

struct EncodedSamples {
  std::vector<LabelledTokens> kept;
  uint64_t lines = 0, truncated = 0, dropped = 0;
};

bool blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Cut to the window. False (nothing changed) when no learned target would be left in it:
// position 0 is never a target.
bool fit_window(LabelledTokens& t, size_t per, uint64_t& truncated) {
  const size_t kept = std::min(t.ids.size(), per);
  if (kept < 2 || std::none_of(t.learn.begin() + 1, t.learn.begin() + static_cast<std::ptrdiff_t>(kept),
                               [](uint8_t l) { return l != 0; }))
    return false;
  if (kept < t.ids.size()) ++truncated;
  t.ids.resize(kept);
  t.learn.resize(kept);
  return true;
}

EncodedSamples encode_files(const InstructionPrepareOptions& opt, const Tokenizer& tokenizer, const ChatTemplate& chat) {
  uint64_t bytes = 0;
  for (const auto& file : opt.inputs) bytes += fs::file_size(file);
  Progress progress("data: encoding", static_cast<int64_t>(bytes), "B", 0.25);
  EncodedSamples out;
  const size_t per = static_cast<size_t>(opt.seq_len + 1);
  uint64_t done = 0;
  for (const auto& file : opt.inputs) {
    std::ifstream in(file, std::ios::binary);
    CADRE_CONFIG_CHECK(in, "--input '", file, "': cannot read");
    std::string line;
    for (uint64_t number = 1; std::getline(in, line); ++number) {
      done += line.size() + 1;
      if (blank(line)) continue;
      const std::string where = str(file, ":", number);
      const InstructionSample sample = instruction_sample_parse(line, where);
      LabelledTokens t;
      try {
        t = labelled_tokens(sample, tokenizer, chat, /*train_on_prompt=*/false);
      } catch (const ChatRefused& e) {
        throw ConfigError(str(where, ": ", e.what()));
      }
      ++out.lines;
      if (fit_window(t, per, out.truncated)) out.kept.push_back(std::move(t));
      else ++out.dropped;
      progress.update(static_cast<int64_t>(std::min(done, bytes)));
    }
  }
  progress.finish();
  return out;
}

// Samples `order[first, first + n)` as padded windows: tokens, and labels (the token where
// learned, else the prompt or padding code).
void pad_windows(const std::vector<LabelledTokens>& samples, const std::vector<uint64_t>& order, uint64_t first,
                 uint64_t n, size_t per, uint32_t pad_id, LabelCodes codes, std::vector<uint32_t>& tokens,
                 std::vector<uint32_t>& labels) {
  tokens.assign(n * per, pad_id);
  labels.assign(n * per, codes.padding);
  for (uint64_t i = 0; i < n; ++i) {
    const LabelledTokens& t = samples[order[first + i]];
    for (size_t k = 0; k < t.ids.size(); ++k) {
      tokens[i * per + k] = static_cast<uint32_t>(t.ids[k]);
      labels[i * per + k] = t.learn[k] ? static_cast<uint32_t>(t.ids[k]) : codes.prompt;
    }
  }
}

// The same samples packed into windows in order, whole: a sample that does not fit in what is
// left of the window starts the next one (torchtune's rule, without splitting a sample). Each
// sample's first token, and a window's padding tail, is labelled as a document start, so the
// loader knows where documents begin and the padding attends only to itself.
void pack_windows(const std::vector<LabelledTokens>& samples, const std::vector<uint64_t>& order, uint64_t first,
                  uint64_t n, size_t per, uint32_t pad_id, LabelCodes codes, std::vector<uint32_t>& tokens,
                  std::vector<uint32_t>& labels) {
  tokens.clear();
  labels.clear();
  auto close_window = [&] {
    const size_t used = tokens.size() % per;
    if (used == 0) return;
    tokens.resize(tokens.size() + (per - used), pad_id);
    labels.push_back(codes.document_start);
    labels.resize(tokens.size(), codes.padding);
  };
  for (uint64_t i = 0; i < n; ++i) {
    const LabelledTokens& t = samples[order[first + i]];
    if (tokens.size() % per + t.ids.size() > per) close_window();
    for (size_t k = 0; k < t.ids.size(); ++k) {
      tokens.push_back(static_cast<uint32_t>(t.ids[k]));
      labels.push_back(k == 0 ? codes.document_start : t.learn[k] ? static_cast<uint32_t>(t.ids[k]) : codes.prompt);
    }
  }
  close_window();
}

void check_options(const InstructionPrepareOptions& opt) {
  CADRE_CONFIG_CHECK(!opt.inputs.empty(), "--input: give at least one .jsonl file");
  CADRE_CONFIG_CHECK(!opt.out.empty(), "--out: give an output directory");
  CADRE_CONFIG_CHECK(!opt.tokenizer.empty(),
                     "--tokenizer: instruction data is encoded with the model's tokenizer (a .model, tokenizer.json "
                     "or model folder); none is trained for it");
  CADRE_CONFIG_CHECK(fs::exists(opt.tokenizer), "--tokenizer '", opt.tokenizer, "': no such file or folder");
  CADRE_CONFIG_CHECK(opt.packing == "pad" || opt.packing == "documents", "--packing '", opt.packing,
                     "': pad (one sample per window) or documents (samples packed, each attending to itself)");
  CADRE_CONFIG_CHECK(opt.seq_len >= 1, "--seq-len must be >= 1, got ", opt.seq_len);
  CADRE_CONFIG_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1, "--val-fraction must be in [0, 1), got ",
                     opt.val_fraction);
  CADRE_CONFIG_CHECK(opt.shard_samples >= 1, "--shard-samples must be >= 1");
  for (const auto& file : opt.inputs)
    CADRE_CONFIG_CHECK(is_jsonl_path(file) && fs::is_regular_file(file), "--input '", file,
                       "': expected a .jsonl file (instruction data is not mixed with text files or folders)");
}

}  // namespace

bool is_jsonl_path(const std::string& path) { return fs::path(path).extension() == ".jsonl"; }

DatasetManifest instruction_prepare(const InstructionPrepareOptions& opt) {
  check_options(opt);
  fs::create_directories(opt.out);
  fs::remove(opt.out + "/manifest.json");  // a stale manifest must not describe the new shards
  const std::unique_ptr<Tokenizer> tokenizer = dataset_use_tokenizer(opt.tokenizer, opt.out);
  const ChatTemplate chat = ChatTemplate::load(opt.chat_template, *tokenizer);
  const EncodedSamples encoded = encode_files(opt, *tokenizer, chat);
  const uint64_t samples = encoded.kept.size();
  const uint64_t val =
      opt.val_fraction > 0 ? std::max<uint64_t>(1, static_cast<uint64_t>(double(samples) * opt.val_fraction)) : 0;
  CADRE_CONFIG_CHECK(samples >= val + 1, "only ", samples, " of ", encoded.lines, " samples have an answer within ",
                     opt.seq_len + 1, " tokens; need at least ", val + 1, " (raise --seq-len or add samples)");

  DatasetManifest m;
  m.tokenizer = fs::path(tokenizer->ids_file()).filename().string();
  m.tokenizer_identity = tokenizer_identity(tokenizer->ids_file());
  m.vocab_size = tokenizer->vocab_size();
  m.seq_len = opt.seq_len;
  m.token_bytes = m.vocab_size <= 65536 ? 2 : 4;
  m.bos_id = tokenizer->bos_id();
  m.eos_id = tokenizer->eos_id();
  m.documents = samples;
  uint64_t learned = 0;
  for (const auto& t : encoded.kept) {
    m.tokens += t.ids.size();
    learned += static_cast<uint64_t>(std::count(t.learn.begin() + 1, t.learn.end(), 1));
  }
  m.packing = opt.packing;
  const bool packed = opt.packing == "documents";  // m.packed() needs the label shards, written below
  const size_t per = static_cast<size_t>(opt.seq_len + 1);
  const uint32_t pad_id = static_cast<uint32_t>(std::max(0, tokenizer->eos_id()));
  const uint32_t labels_width = label_bytes(m.vocab_size);
  const std::vector<uint64_t> order = permutation(samples, static_cast<uint64_t>(opt.seed), 0);
  std::vector<uint32_t> tokens, labels;
  const uint64_t shard = static_cast<uint64_t>(opt.shard_samples);
  uint64_t windows[2] = {0, 0};
  for (const auto& [name, first, n] : {std::tuple<std::string, uint64_t, uint64_t>("train", 0, samples - val),
                                       std::tuple<std::string, uint64_t, uint64_t>("val", samples - val, val)}) {
    (packed ? pack_windows : pad_windows)(encoded.kept, order, first, n, per, pad_id, label_codes(labels_width),
                                               tokens, labels);
    const uint64_t count = tokens.size() / per;
    windows[name == "val"] = count;
    (name == "train" ? m.train : m.val) = token_split_write(opt.out, name, tokens.data(), count, per, shard, m.token_bytes);
    (name == "train" ? m.train_labels : m.val_labels) =
        token_split_write(opt.out, name + "_labels", labels.data(), count, per, shard, labels_width);
  }
  manifest_write(opt.out, m);
  const uint64_t window_tokens = (windows[0] + windows[1]) * per;
  log::info(str("data: ", encoded.lines, " samples: ", encoded.truncated, " truncated to ", per, " tokens, ",
                encoded.dropped, " dropped (no answer token within them); ", samples - val, " train + ", val,
                " val samples ", packed ? "packed into " : "in ", windows[0], " + ", windows[1], " windows, ",
                learned, " learned targets, ", int(100.0 * (1.0 - double(m.tokens) / double(window_tokens)) + 0.5),
                "% padding, in '", opt.out, "'"));
  return m;
}

}  // namespace cadre
