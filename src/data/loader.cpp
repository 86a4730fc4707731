// Token loader implementation.
#include "data/loader.h"

#include <algorithm>

#include "core/error.h"

namespace cadre {

namespace {

// The shard a manifest entry names, checked against the entry.
ShardReader open_shard(const std::string& dir, const ShardEntry& e, uint64_t per) {
  const std::string path = dir + "/" + e.file;
  ShardReader reader(path, /*verify=*/true);
  CADRE_CHECK(reader.checksum() == e.checksum, "shard '", path, "' does not match the manifest's checksum");
  CADRE_CHECK(reader.size() / per == e.samples && reader.size() % per == 0, "shard '", path, "' holds ",
              reader.size(), " tokens; the manifest says ", e.samples, " samples of ", per);
  return reader;
}

}  // namespace

TokenLoader::TokenLoader(const std::string& dir, Split split, uint64_t seed, bool train_on_prompt)
    : manifest_(manifest_read(dir)), train_on_prompt_(train_on_prompt) {
  CADRE_CONFIG_CHECK(manifest_.kind == "tokens", "dataset '", dir, "' holds ", manifest_.kind, ", not tokens");
  const auto& entries = split == Split::Train ? manifest_.train : manifest_.val;
  const uint64_t per = static_cast<uint64_t>(manifest_.seq_len + 1);
  for (const auto& e : entries) {
    shard_start_.push_back(total_);
    total_ += e.samples;
    shards_.push_back(open_shard(dir, e, per));
  }
  for (const auto& e : split == Split::Train ? manifest_.train_labels : manifest_.val_labels) {
    labels_.push_back(open_shard(dir, e, per));
    codes_ = label_codes(labels_.back().token_bytes());
  }
  CADRE_CHECK(total_ > 0, "dataset '", dir, "' has no ", split == Split::Train ? "train" : "val", " samples");
  order_ = std::make_unique<SampleOrder>(total_, seed, split);
}

void TokenLoader::sample(uint64_t index, int64_t* out, int64_t* labels, std::vector<int64_t>* starts) const {
  CADRE_CHECK(index < total_, "sample ", index, " out of range (", total_, " samples)");
  size_t s = std::upper_bound(shard_start_.begin(), shard_start_.end(), index) - shard_start_.begin() - 1;
  const uint64_t per = static_cast<uint64_t>(manifest_.seq_len + 1), first = (index - shard_start_[s]) * per;
  shards_[s].read(first, per, out);
  if (!labelled()) return;
  CADRE_CHECK(labels, "the dataset is labelled: sample ", index, " needs somewhere to put its labels");
  labels_[s].read(first, per, labels);
  if (packed()) {
    CADRE_CHECK(starts, "the dataset is packed: sample ", index, " needs somewhere to put its document starts");
    starts->clear();
  }
  for (uint64_t i = 0; i < per; ++i) {
    const uint64_t code = static_cast<uint64_t>(labels[i]);
    if (packed() && code == codes_.document_start) {
      starts->push_back(static_cast<int64_t>(i));
      labels[i] = -100;
    } else if (code == codes_.padding || (code == codes_.prompt && !train_on_prompt_)) {
      labels[i] = -100;
    } else if (code == codes_.prompt) {
      labels[i] = out[i];
    }
  }
  CADRE_CHECK(!packed() || (!starts->empty() && starts->front() == 0), "packed sample ", index,
              " does not begin with a document start: its labels shard is not from a packed prepare");
}

void TokenLoader::next(uint64_t global_samples, uint64_t first, uint64_t count, int64_t* out, int64_t* labels,
                       std::vector<int64_t>* starts) {
  CADRE_CHECK(first + count <= global_samples, "loader slice [", first, ", ", first + count,
              ") is outside the global batch of ", global_samples);
  const uint64_t per = static_cast<uint64_t>(manifest_.seq_len + 1);
  for (uint64_t i = 0; i < count; ++i)
    sample(order_->at(consumed_ + first + i), out + i * per, labels ? labels + i * per : nullptr,
           starts ? starts + i : nullptr);
  consumed_ += global_samples;
}

}  // namespace cadre
