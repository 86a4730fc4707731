// Dataset preparation. Documents are shuffled by seed, each encoded as BOS + text + EOS,
// concatenated, and cut into samples of exactly seq_len + 1 tokens (static shapes); the tail
// that does not fill a sample is dropped. The last val_fraction of samples is validation.
#include "data/prepare.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/permutation.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_split.h"
#include "data/tokenizer.h"
#include "data/tokenizer_identity.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CADRE_CHECK(in, "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// SentencePiece skips training sentences longer than its limit, and these documents are one
// line each: split at sentence ends so every part of the corpus is seen.
void write_training_lines(const std::vector<std::string>& docs, const std::string& path) {
  std::ofstream out(path);
  for (const auto& doc : docs) {
    std::string line;
    for (size_t i = 0; i < doc.size(); ++i) {
      char c = doc[i];
      if (c == '\n' || c == '\r') {
        if (!line.empty()) out << line << "\n";
        line.clear();
        continue;
      }
      line += c;
      bool sentence_end = (c == '.' || c == '?' || c == '!') && i + 1 < doc.size() && doc[i + 1] == ' ';
      if ((sentence_end && line.size() > 40) || line.size() > 4000) {
        out << line << "\n";
        line.clear();
        ++i;  // drop the space after the sentence end
      }
    }
    if (!line.empty()) out << line << "\n";
  }
  CADRE_CHECK(out.good(), "cannot write '", path, "'");
}

// The files of the tokenizer `source` names (a .model, a tokenizer.json or a folder) copied
// into `out`, with those of another kind removed: the data's tokenizer is whatever `out` holds.
void copy_tokenizer_files(const std::string& source, const std::string& out) {
  const std::string file = fs::is_directory(source) ? tokenizer_file_in(source) : source;
  CADRE_CONFIG_CHECK(!file.empty(), "--tokenizer '", source, "' holds neither tokenizer.model nor tokenizer.json");
  const bool hf = fs::path(file).extension() == ".json";
  std::vector<std::string> names = {hf ? "tokenizer.json" : "tokenizer.model"};
  if (hf)
    for (const char* extra : {"tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
                              "chat_template.jinja"})
      names.push_back(extra);
  for (const char* stale : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                            "special_tokens_map.json", "chat_template.jinja"})
    if (std::find(names.begin(), names.end(), stale) == names.end()) fs::remove(fs::path(out) / stale);
  const fs::path from_dir = fs::path(file).parent_path();
  for (const std::string& name : names) {
    const fs::path from = name == names.front() ? fs::path(file) : from_dir / name, to = fs::path(out) / name;
    if (!fs::is_regular_file(from)) fs::remove(to);  // an earlier run's, not this tokenizer's
    else if (!fs::exists(to) || !fs::equivalent(from, to)) fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  }
}

// The run's tokenizer: --tokenizer's files copied into the output, or one trained on the corpus.
std::unique_ptr<Tokenizer> data_tokenizer(const PrepareOptions& opt, const std::vector<std::string>& docs) {
  if (!opt.tokenizer.empty()) return dataset_use_tokenizer(opt.tokenizer, opt.out);
  std::string lines = opt.out + "/tokenizer_input.txt";
  write_training_lines(docs, lines);
  log::info(str("data: training a SentencePiece BPE tokenizer, vocabulary ", opt.vocab_size));
  tokenizer_train(lines, opt.out + "/tokenizer", opt.vocab_size, opt.threads);
  fs::remove(lines);
  copy_tokenizer_files(opt.out + "/tokenizer.model", opt.out);  // removes a tokenizer.json of an earlier run
  return tokenizer_load(opt.out + "/tokenizer.model");
}

}  // namespace

std::unique_ptr<Tokenizer> dataset_use_tokenizer(const std::string& source, const std::string& out) {
  copy_tokenizer_files(source, out);
  return tokenizer_load(out);
}

std::vector<std::string> dataset_list_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::recursive_directory_iterator(input))
        if (entry.is_regular_file() && entry.path().extension() == ".txt") found.push_back(entry.path().string());
      if (found.empty()) throw ConfigError(str("--input '", input, "': directory holds no .txt files"));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(input, ec)) {
      files.push_back(input);
    } else {
      throw ConfigError(str("--input '", input, "': no such file or directory"));
    }
  }
  return files;
}

DatasetManifest dataset_prepare(const PrepareOptions& opt) {
  CADRE_CONFIG_CHECK(!opt.inputs.empty(), "--input: give at least one file or directory");
  CADRE_CONFIG_CHECK(!opt.out.empty(), "--out: give an output directory");
  CADRE_CONFIG_CHECK(opt.seq_len >= 1, "--seq-len must be >= 1, got ", opt.seq_len);
  CADRE_CONFIG_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1, "--val-fraction must be in [0, 1), got ", opt.val_fraction);
  CADRE_CONFIG_CHECK(opt.tokenizer.empty() ? (opt.vocab_size >= 260 && opt.vocab_size <= (1 << 24)) : true,
                     "--vocab-size must be in [260, 16777216] (byte fallback needs 256 + specials), got ", opt.vocab_size);
  CADRE_CONFIG_CHECK(opt.shard_samples >= 1, "--shard-samples must be >= 1");
  CADRE_CONFIG_CHECK(opt.tokenizer.empty() || fs::exists(opt.tokenizer),
                     "--tokenizer '", opt.tokenizer, "': no such file or folder");
  std::vector<std::string> files = dataset_list_files(opt.inputs);

  fs::create_directories(opt.out);
  // A stale manifest must not describe new shards while they are being written.
  fs::remove(opt.out + "/manifest.json");

  std::vector<std::string> docs;
  docs.reserve(files.size());
  uint64_t bytes = 0;
  for (const auto& f : files) {
    docs.push_back(read_file(f));
    bytes += docs.back().size();
  }
  log::info(str("data: ", docs.size(), " documents, ", bytes / 1024, " KiB of text"));

  std::unique_ptr<Tokenizer> owned = data_tokenizer(opt, docs);
  const Tokenizer& tokenizer = *owned;

  // Encode documents in parallel; order is fixed by the seeded shuffle below, not by threads.
  std::vector<std::vector<int>> encoded(docs.size());
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done_bytes{0};
  std::vector<std::thread> workers;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  for (int t = 0; t < std::max(1, opt.threads); ++t) {
    workers.emplace_back([&] {
      try {
        for (size_t i; (i = next++) < docs.size();) {
          encoded[i] = tokenizer.encode(docs[i]);
          done_bytes += docs[i].size();
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  {
    Progress progress("data: tokenizing", static_cast<int64_t>(bytes), "B", 0.25);
    while (next.load() < docs.size() || done_bytes.load() < bytes) {
      if (failure) break;
      progress.update(static_cast<int64_t>(done_bytes.load()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (auto& w : workers) w.join();
    if (failure) std::rethrow_exception(failure);
    progress.update(static_cast<int64_t>(bytes));
    progress.finish();
  }

  const int bos = tokenizer.bos_id(), eos = tokenizer.eos_id();
  std::vector<uint32_t> stream;
  for (uint64_t i : permutation(docs.size(), static_cast<uint64_t>(opt.seed), 0)) {
    if (bos >= 0) stream.push_back(static_cast<uint32_t>(bos));
    for (int id : encoded[i]) stream.push_back(static_cast<uint32_t>(id));
    if (eos >= 0) stream.push_back(static_cast<uint32_t>(eos));
  }
  const uint64_t per = static_cast<uint64_t>(opt.seq_len + 1);
  const uint64_t samples = stream.size() / per;
  uint64_t val = opt.val_fraction > 0 ? std::max<uint64_t>(1, static_cast<uint64_t>(samples * opt.val_fraction)) : 0;
  CADRE_CONFIG_CHECK(samples >= val + 1, "corpus too small: ", stream.size(), " tokens make ", samples,
                     " samples of ", per, " tokens; need at least ", val + 1, " (lower --seq-len or add text)");

  DatasetManifest m;
  m.tokenizer = fs::path(tokenizer.ids_file()).filename().string();
  m.tokenizer_identity = tokenizer_identity(tokenizer.ids_file());
  m.vocab_size = tokenizer.vocab_size();
  m.seq_len = opt.seq_len;
  m.token_bytes = m.vocab_size <= 65536 ? 2 : 4;
  m.bos_id = bos;
  m.eos_id = eos;
  m.documents = docs.size();
  m.tokens = stream.size();
  const uint64_t shard = static_cast<uint64_t>(opt.shard_samples);
  m.train = token_split_write(opt.out, "train", stream.data(), samples - val, per, shard, m.token_bytes);
  m.val = token_split_write(opt.out, "val", stream.data() + (samples - val) * per, val, per, shard, m.token_bytes);
  manifest_write(opt.out, m);
  log::info(str("data: ", m.tokens, " tokens -> ", samples - val, " train + ", val, " val samples of ", per,
                " tokens in '", opt.out, "'"));
  return m;
}

}  // namespace cadre
