// The decode thread pool and its prefetch queue.
#include "data/encoded_image_loader.h"

#include <algorithm>

#include "core/error.h"
#include "data/permutation.h"

namespace cadre {

struct EncodedImageLoader::Job {
  uint64_t position = 0, global = 0, first = 0, count = 0;  // the train batch this is (ahead_)
  std::vector<ShardRecord> records;
  std::vector<uint64_t> seeds;  // per sample: its crop and flip draws
  ImageBatch batch;
  size_t next = 0, done = 0;     // under the loader's mutex
  std::string error;
};

HostBuffer host_buffer_plain(size_t bytes) {
  auto memory = std::shared_ptr<uint8_t>(new uint8_t[bytes == 0 ? 1 : bytes], std::default_delete<uint8_t[]>());
  return {memory.get(), memory};
}

EncodedImageLoader::EncodedImageLoader(const std::string& dir, Split split, uint64_t seed, EncodedLoaderOptions options)
    : manifest_(manifest_read(dir)), options_(std::move(options)), seed_(seed) {
  CADRE_CONFIG_CHECK(manifest_.kind == "encoded_images", "dataset '", dir, "' holds ", manifest_.kind,
                     ", not encoded images (prepare an ImageFolder with `cadre data prepare --images`)");
  CADRE_CONFIG_CHECK(options_.workers >= 1, "data.workers must be at least 1, got ", options_.workers);
  CADRE_CONFIG_CHECK(options_.prefetch >= 1, "the prefetch depth must be at least 1, got ", options_.prefetch);
  std::vector<uint64_t> sizes;
  for (const auto& e : split == Split::Train ? manifest_.train : manifest_.val) {
    const std::string path = dir + "/" + e.file;
    EncodedShardReader reader(path, options_.verify);
    CADRE_CHECK(reader.checksum() == e.checksum, "encoded image shard '", path, "' does not match the manifest's checksum");
    CADRE_CHECK(reader.size() == e.samples, "encoded image shard '", path, "' holds ", reader.size(),
                " images; the manifest says ", e.samples);
    sizes.push_back(e.samples);
    shards_.push_back(std::move(reader));
  }
  CADRE_CHECK(!sizes.empty(), "dataset '", dir, "' has no ", split == Split::Train ? "train" : "val", " shards");
  order_ = std::make_unique<ShardWindowOrder>(std::move(sizes), seed, split, options_.window);
  for (int t = 0; t < options_.workers; ++t) threads_.emplace_back([this] { worker(); });
}

EncodedImageLoader::~EncodedImageLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::shared_ptr<EncodedImageLoader::Job> EncodedImageLoader::make_job(std::vector<ShardRecord> records, uint64_t seed_base) {
  auto job = std::make_shared<Job>();
  job->count = records.size();
  job->records = std::move(records);
  job->batch.count = job->count;
  job->batch.labels.resize(job->count);
  job->batch.pixels = options_.alloc(job->count * options_.transform.bytes_per_sample());
  for (uint64_t i = 0; i < job->count; ++i) {
    uint64_t state = seed_ * 0x9E3779B97F4A7C15ULL ^ (seed_base + i);
    job->seeds.push_back(splitmix64(state));
  }
  return job;
}

std::shared_ptr<EncodedImageLoader::Job> EncodedImageLoader::schedule(uint64_t position, uint64_t global, uint64_t first,
                                                                      uint64_t count) {
  std::vector<ShardRecord> records;
  for (uint64_t i = 0; i < count; ++i) records.push_back(order_->at(position + first + i));
  // Seeded by the sample's stream position: the same draws whatever the batch split or world size.
  auto job = make_job(std::move(records), position + first);
  job->position = position;
  job->global = global;
  job->first = first;
  return job;
}

void EncodedImageLoader::decode_one(Job& job, size_t i) {
  const ShardRecord r = job.records[i];
  const EncodedShardReader& shard = shards_[r.shard];
  const EncodedIndexEntry& e = shard.entry(r.record);
  SampleRng rng(job.seeds[i]);
  job.batch.labels[i] = e.label;
  transform_image(shard.bytes(r.record), e.size, options_.transform, rng,
                  job.batch.pixels.data + i * options_.transform.bytes_per_sample(),
                  str(shard.path(), " record ", r.record));
}

void EncodedImageLoader::worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    std::shared_ptr<Job> job;
    work_cv_.wait(lock, [&] {
      if (stop_) return true;
      for (auto* q : {&urgent_, &ahead_})
        for (auto& j : *q)
          if (j->next < j->count) {
            job = j;
            return true;
          }
      return false;
    });
    if (stop_) return;
    const size_t i = job->next++;
    lock.unlock();
    std::string error;
    try {
      decode_one(*job, i);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty() && job->error.empty()) job->error = error;
    if (++job->done == job->count) done_cv_.notify_all();
  }
}

ImageBatch EncodedImageLoader::wait(const std::shared_ptr<Job>& job) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return job->done == job->count; });
  if (!job->error.empty()) throw Error(str("image loader: ", job->error));
  return std::move(job->batch);
}

ImageBatch EncodedImageLoader::next(uint64_t global, uint64_t first, uint64_t count) {
  CADRE_CHECK(count > 0 && first + count <= global, "loader slice [", first, ", ", first + count,
              ") is outside the global batch of ", global);
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool hit = !ahead_.empty() && ahead_.front()->position == consumed_ && ahead_.front()->global == global &&
                     ahead_.front()->first == first && ahead_.front()->count == count;
    if (!hit) ahead_.clear();  // a new position or batch shape: what was decoded ahead is not needed
    // Keep `prefetch` batches in flight after the one returned now.
    uint64_t position = ahead_.empty() ? consumed_ : ahead_.back()->position + global;
    while (ahead_.size() < static_cast<size_t>(options_.prefetch) + 1) {
      ahead_.push_back(schedule(position, global, first, count));
      position += global;
    }
    job = ahead_.front();
  }
  work_cv_.notify_all();
  ImageBatch batch = wait(job);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ahead_.pop_front();
  }
  consumed_ += global;
  return batch;
}

ImageBatch EncodedImageLoader::at(const std::vector<uint64_t>& indices) {
  std::vector<ShardRecord> records;
  for (uint64_t i : indices) records.push_back(order_->in_file_order(i));
  auto job = make_job(std::move(records), 0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    urgent_.push_back(job);
  }
  work_cv_.notify_all();
  ImageBatch batch = wait(job);
  std::lock_guard<std::mutex> lock(mutex_);
  urgent_.erase(std::find(urgent_.begin(), urgent_.end(), job));
  return batch;
}

void EncodedImageLoader::set_position(uint64_t position) {
  std::lock_guard<std::mutex> lock(mutex_);
  ahead_.clear();
  consumed_ = position;
}

}  // namespace cadre
