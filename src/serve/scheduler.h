// Continuous batching: requests wait in a bounded queue; a request starts as soon as there
// are free decoding slots for all its choices and room in the KV-cache budget for the most
// each can hold (prompt + max_tokens, in the decoder's blocks), joins the next decoding step and leaves the
// batch when it finishes, between steps, without waiting for the others. Each step feeds the
// decoder one token per running sequence plus chunks of new prompts (prefill), all in one
// forward. Because the decoder computes every row with batch-independent shapes and every
// sequence samples from its own random stream, a request's tokens do not depend on what else
// runs beside it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/tokenizer.h"
#include "generate/sequence.h"
#include "models/model.h"
#include "serve/api_error.h"
#include "serve/metrics.h"

namespace cadre {

struct SchedulerOptions {
  int64_t max_batch = 32;    // sequences decoded together (the decoder's slots)
  int64_t max_queue = 64;    // requests waiting; more are refused (HTTP 429)
  int64_t step_tokens = 256; // prompt tokens a step may take in besides one token per sequence
  int64_t threads = 2;       // compute threads of the decoding loop
  // An idle server holds its first requests up to this long for a full batch (max_batch
  // sequences queued, counting each request's n) before its first step: a dynamic-batching
  // delay, as Triton's max_queue_delay; a drain ends it at once. 0 (default): decode as soon
  // as anything is queued.
  int64_t batch_wait_ms = 0;
  // Cached positions all sequences together may hold (a whole number of the decoder's blocks);
  // 0: no budget beyond the slots. A request needing more than all of it is refused (400).
  int64_t kv_cache_tokens = 0;
};

struct SequenceEvent {
  int64_t choice = 0;  // which of the request's n sequences
  StepResult step;
};

// A request as both sides see it: the HTTP handler waits for its events; the scheduler
// produces them.
class RequestState {
 public:
  // Blocks until events are there (appended to `out`) or every choice finished; returns false
  // once everything was delivered. With a timeout, returns true with nothing on expiry.
  bool next(std::vector<SequenceEvent>& out, std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  // The client went away: its sequences leave the batch at the next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  int64_t prompt_tokens() const { return static_cast<int64_t>(prompt_.size()); }
  int64_t completion_tokens() const;
  int64_t n() const { return n_; }
  // Set when decoding failed (the request ends with what it had).
  std::string error() const;

 private:
  friend class Scheduler;
  void push(SequenceEvent event, bool finished);
  void fail(const std::string& error);

  std::vector<int> prompt_;
  GenerationParams params_;
  int64_t n_ = 1;
  uint64_t seed_ = 0;
  int64_t adapter_ = -1;  // the LoRA adapter its rows run with; -1: the base
  std::chrono::steady_clock::time_point submitted_;
  bool first_token_ = false;
  bool waited_for_cache_ = false;  // counted once in the metrics
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<SequenceEvent> events_;
  int64_t unfinished_ = 0;
  int64_t generated_ = 0;
  std::string error_;
};

class Scheduler {
 public:
  Scheduler(Decoder& decoder, const Tokenizer& tokenizer, SchedulerOptions options, ServeMetrics& metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request of n sequences (n <= max_batch; the prompt must leave room for at least
  // one token). Null when the queue is full; ApiError(503) once draining; ApiError(400) when
  // its n sequences of prompt + max_tokens could never fit the KV-cache budget.
  // `adapter`: the decoder's LoRA adapter its rows run with (Decoder::add_adapter), -1 the base.
  std::shared_ptr<RequestState> submit(std::vector<int> prompt, GenerationParams params, int64_t n, uint64_t seed,
                                       int64_t adapter = -1);
  // From now on submit() refuses; what is queued or running still completes (a batching wait
  // ends at once).
  void drain();
  bool draining() const { return draining_; }
  // Blocks until nothing is queued or running.
  void wait_idle();
  int64_t context() const { return decoder_.max_len(); }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Running {
    std::shared_ptr<RequestState> request;
    int64_t choice = 0, slot = 0;
    int64_t reserved_tokens = 0;  // of the KV-cache budget
    std::unique_ptr<Sequence> sequence;
  };
  void loop();
  void admit();       // queued requests into free slots (caller holds mutex_)
  // Cache positions one sequence of the request may come to hold, in whole blocks.
  int64_t reservation(const std::vector<int>& prompt, const GenerationParams& params) const;
  ApiError kv_cache_budget_error(const std::vector<int>& prompt, const GenerationParams& params, int64_t n,
                                 int64_t per_sequence) const;
  void release(Running& run);  // its slot, cache blocks and reservation (caller holds mutex_)
  void publish_state();        // queue and cache gauges (caller holds mutex_)
  void retire_finished();  // sequences that finished leave the batch
  void drop_cancelled();
  void step();
  int64_t queued_sequences() const;  // caller holds mutex_

  Decoder& decoder_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  ServeMetrics& metrics_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<RequestState>> queue_;
  std::vector<Running> running_;
  std::vector<int64_t> free_slots_;
  int64_t reserved_tokens_ = 0;  // of options_.kv_cache_tokens, by the running sequences
  bool held_back_ = false;       // the last admission left requests queued
  bool stopping_ = false;
  std::atomic<bool> draining_{false};
  int64_t steps_ = 0;
  std::thread thread_;
};

}  // namespace cadre
