// The loader of encoded image shards: N decode threads (`workers`) turn encoded bytes into
// transformed samples (data/image_transform.h) while training runs, `prefetch` global batches
// ahead in a bounded queue. Every sample's crop and flip come from (seed, position) alone, so
// the batches are the same for any number of workers, and resume and resharding are exact
// (position semantics of data/sample_order.h; order of data/shard_window_order.h).
// Batches go into host buffers from an allocator the caller may replace: the hook where a
// CUDA run allocates page-locked memory (train/batch_source.cpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/encoded_shard.h"
#include "data/image_transform.h"
#include "data/manifest.h"
#include "data/shard_window_order.h"

namespace cadre {

struct HostBuffer {
  uint8_t* data = nullptr;
  std::shared_ptr<void> owner;  // keeps the memory alive
};
using HostBufferAlloc = std::function<HostBuffer(size_t bytes)>;
// Plain (pageable) host memory.
HostBuffer host_buffer_plain(size_t bytes);

struct EncodedLoaderOptions {
  ImageTransform transform;
  int workers = 1;               // decode threads
  int prefetch = 2;              // global batches decoded ahead
  uint64_t window = 4096;        // shuffle window (samples), data/shard_window_order.h
  bool verify = true;            // check each shard's checksum when opening it
  HostBufferAlloc alloc = host_buffer_plain;
};

struct ImageBatch {
  HostBuffer pixels;             // count samples of transform.bytes_per_sample(), CHW each
  std::vector<int64_t> labels;
  uint64_t count = 0;
};

class EncodedImageLoader {
 public:
  EncodedImageLoader(const std::string& dir, Split split, uint64_t seed, EncodedLoaderOptions options);
  ~EncodedImageLoader();
  EncodedImageLoader(const EncodedImageLoader&) = delete;
  EncodedImageLoader& operator=(const EncodedImageLoader&) = delete;

  const DatasetManifest& manifest() const { return manifest_; }
  const EncodedLoaderOptions& options() const { return options_; }
  uint64_t num_samples() const { return order_->total(); }

  // Consumes one global micro-batch of `global` samples; returns samples [first, first + count).
  ImageBatch next(uint64_t global, uint64_t first, uint64_t count);
  // The samples at these split indices (file order), decoded now by the workers.
  ImageBatch at(const std::vector<uint64_t>& indices);
  uint64_t position() const { return consumed_; }
  void set_position(uint64_t position);

 private:
  struct Job;
  std::shared_ptr<Job> make_job(std::vector<ShardRecord> records, uint64_t seed_base);
  std::shared_ptr<Job> schedule(uint64_t position, uint64_t global, uint64_t first, uint64_t count);
  ImageBatch wait(const std::shared_ptr<Job>& job);
  void worker();
  void decode_one(Job& job, size_t i);

  DatasetManifest manifest_;
  EncodedLoaderOptions options_;
  std::vector<EncodedShardReader> shards_;
  std::unique_ptr<ShardWindowOrder> order_;
  uint64_t seed_ = 0;
  uint64_t consumed_ = 0;

  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> urgent_, ahead_;  // jobs the workers take samples from, in order
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace cadre
