// The decoding loop: admit, drop cancelled, one forward over every running sequence, sample.
#include "serve/scheduler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "core/cpu_block_cache.h"
#include "core/error.h"
#include "core/log.h"
#include "serve/api_error.h"

namespace cadre {

using Clock = std::chrono::steady_clock;

bool RequestState::next(std::vector<SequenceEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] { return !events_.empty() || unfinished_ == 0; };
  if (timeout == std::chrono::milliseconds::max()) cv_.wait(lock, ready);
  else if (!cv_.wait_for(lock, timeout, ready)) return true;
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return !(out.empty() && unfinished_ == 0);
}

int64_t RequestState::completion_tokens() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generated_;
}

std::string RequestState::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void RequestState::push(SequenceEvent event, bool finished) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generated_;
    events_.push_back(std::move(event));
    if (finished) --unfinished_;
  }
  cv_.notify_all();
}

void RequestState::fail(const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    unfinished_ = 0;
  }
  cv_.notify_all();
}

Scheduler::Scheduler(Decoder& decoder, const Tokenizer& tokenizer, SchedulerOptions options, ServeMetrics& metrics)
    : decoder_(decoder), tokenizer_(tokenizer), options_(options), metrics_(metrics) {
  CADRE_CHECK(options_.max_batch == decoder_.slots(), "scheduler: max_batch ", options_.max_batch, " != decoder slots ",
              decoder_.slots());
  CADRE_CHECK(options_.kv_cache_tokens >= 0, "scheduler: a KV-cache budget of ", options_.kv_cache_tokens, " tokens");
  for (int64_t s = options_.max_batch - 1; s >= 0; --s) free_slots_.push_back(s);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& r : running_) r.request->fail("the server stopped");
  for (auto& q : queue_) q->fail("the server stopped");
}

std::shared_ptr<RequestState> Scheduler::submit(std::vector<int> prompt, GenerationParams params, int64_t n,
                                                uint64_t seed, int64_t adapter) {
  CADRE_CHECK(n >= 1 && n <= options_.max_batch, "scheduler: n = ", n, " is outside 1..", options_.max_batch);
  CADRE_CHECK(!prompt.empty() && static_cast<int64_t>(prompt.size()) < decoder_.max_len(), "scheduler: a prompt of ",
              prompt.size(), " tokens does not fit a context of ", decoder_.max_len());
  if (draining_) throw ApiError(503, "the server is shutting down", "", "server_shutting_down", "server_error");
  const int64_t per_sequence = reservation(prompt, params), budget = options_.kv_cache_tokens;
  if (budget > 0 && n * per_sequence > budget) {
    metrics_.rejected("kv_cache_budget");
    throw kv_cache_budget_error(prompt, params, n, per_sequence);
  }
  auto state = std::make_shared<RequestState>();
  state->prompt_ = std::move(prompt);
  state->params_ = std::move(params);
  state->n_ = n;
  state->seed_ = seed;
  state->adapter_ = adapter;
  state->unfinished_ = n;
  state->submitted_ = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
      metrics_.rejected("queue_full");
      return nullptr;
    }
    queue_.push_back(state);
    metrics_.set_queue(static_cast<int64_t>(queue_.size()), static_cast<int64_t>(running_.size()));
  }
  cv_.notify_all();
  return state;
}

void Scheduler::drain() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
  }
  cv_.notify_all();  // a batching wait ends at once: nothing more will join the batch
}

int64_t Scheduler::reservation(const std::vector<int>& prompt, const GenerationParams& params) const {
  const int64_t block = decoder_.cache_block_tokens();
  const int64_t most = std::min(static_cast<int64_t>(prompt.size()) + std::max<int64_t>(params.max_tokens, 1),
                                decoder_.max_len());
  return (most + block - 1) / block * block;
}

ApiError Scheduler::kv_cache_budget_error(const std::vector<int>& prompt, const GenerationParams& params, int64_t n,
                                          int64_t per_sequence) const {
  const int64_t block = decoder_.cache_block_tokens(), budget = options_.kv_cache_tokens;
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  const int64_t room = std::min(budget / n / block * block, decoder_.max_len()) - prompt_tokens;  // max_tokens that fits
  std::string message = str("This request needs KV cache for ", n * per_sequence, " tokens (", n == 1 ? "" : str(n, " x "),
                            prompt_tokens, " in the prompt + ", params.max_tokens, " max_tokens, in blocks of ", block,
                            "), more than this server's KV-cache budget of ", budget, " tokens (--kv-cache-memory). ");
  message += room > 0 ? str("Set max_tokens to at most ", room, n > 1 ? " or lower n" : "", ".")
                      : str("The prompt alone does not fit", n > 1 ? " n times; lower n or shorten it." : "; shorten it.");
  return ApiError(400, message, "max_tokens", "kv_cache_budget_exceeded");
}

int64_t Scheduler::queued_sequences() const {
  int64_t n = 0;
  for (const auto& r : queue_) n += r->n_;
  return n;
}

void Scheduler::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && running_.empty(); });
}

void Scheduler::admit() {
  while (!queue_.empty()) {
    std::shared_ptr<RequestState> r = queue_.front();
    if (r->cancelled()) {
      queue_.pop_front();
      metrics_.cancelled();
      r->fail("cancelled");
      continue;
    }
    if (static_cast<int64_t>(free_slots_.size()) < r->n_) break;  // first come, first served
    const int64_t per_sequence = reservation(r->prompt_, r->params_);
    if (options_.kv_cache_tokens > 0 && reserved_tokens_ + r->n_ * per_sequence > options_.kv_cache_tokens) {
      if (!r->waited_for_cache_) metrics_.waited_for_kv_cache();  // slots were free; the cache was not
      r->waited_for_cache_ = true;
      break;
    }
    queue_.pop_front();
    for (int64_t choice = 0; choice < r->n_; ++choice) {
      Running run;
      run.request = r;
      run.choice = choice;
      run.slot = free_slots_.back();
      run.reserved_tokens = per_sequence;
      reserved_tokens_ += per_sequence;
      free_slots_.pop_back();
      decoder_.reset(run.slot);
      run.sequence = std::make_unique<Sequence>(tokenizer_, r->prompt_, r->params_, decoder_.max_len(),
                                                sequence_seed(r->seed_, choice));
      running_.push_back(std::move(run));
    }
    metrics_.tokens(r->prompt_tokens(), 0);
  }
  held_back_ = !queue_.empty();
}

void Scheduler::release(Running& run) {
  decoder_.reset(run.slot);  // frees its cache blocks now, not when the slot is next taken
  free_slots_.push_back(run.slot);
  reserved_tokens_ -= run.reserved_tokens;
  run.reserved_tokens = 0;
}

void Scheduler::publish_state() {
  metrics_.set_queue(static_cast<int64_t>(queue_.size()), static_cast<int64_t>(running_.size()));
  metrics_.set_kv_cache(decoder_.cache_bytes(), decoder_.cache_peak_bytes(),
                        reserved_tokens_ * decoder_.cache_bytes_per_token());
}

void Scheduler::retire_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::remove_if(running_.begin(), running_.end(), [&](Running& r) {
    if (!r.sequence->finished()) return false;
    release(r);
    return true;
  });
  running_.erase(it, running_.end());
  publish_state();
}

void Scheduler::drop_cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<RequestState>> gone;
  auto it = std::remove_if(running_.begin(), running_.end(), [&](Running& r) {
    if (!r.request->cancelled()) return false;
    release(r);
    if (std::find(gone.begin(), gone.end(), r.request) == gone.end()) gone.push_back(r.request);
    return true;
  });
  running_.erase(it, running_.end());
  for (auto& r : gone) {
    metrics_.cancelled();
    r->fail("cancelled");
  }
}

void Scheduler::step() {
  // One token for each sequence that has its logits pending, then prompt chunks.
  std::vector<DecodeRow> rows;
  std::vector<std::pair<size_t, int64_t>> fed;  // (running index, tokens fed)
  std::vector<size_t> sampled;                  // running indices whose last row has logits
  auto feed = [&](size_t i, const std::vector<int>& tokens) {
    const Running& r = running_[i];
    const bool complete = r.sequence->prompt_done(r.sequence->fed() + static_cast<int64_t>(tokens.size()));
    for (size_t k = 0; k < tokens.size(); ++k)
      rows.push_back({r.slot, tokens[k], complete && k + 1 == tokens.size(), r.request->adapter_});
    fed.push_back({i, static_cast<int64_t>(tokens.size())});
    if (complete) sampled.push_back(i);
  };
  for (size_t i = 0; i < running_.size(); ++i) {
    const auto pending = running_[i].sequence->pending_tokens(2);
    if (pending.size() == 1) feed(i, pending);
  }
  // Prompts share a budget per step, so one long prompt does not stall everyone's next token.
  int64_t budget = std::max<int64_t>(options_.step_tokens, 16);
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    if (running_[i].sequence->pending_tokens(2).size() <= 1) continue;  // decoding: fed above
    const auto pending = running_[i].sequence->pending_tokens(budget);
    feed(i, pending);
    budget -= static_cast<int64_t>(pending.size());
  }
  if (rows.empty()) return;
  at::Tensor logits = decoder_.forward(rows);
  for (const auto& [i, n] : fed) running_[i].sequence->mark_fed(n);
  const int64_t vocab = logits.size(1);
  const auto now = Clock::now();
  // Counted before any result is pushed: a client that has its last token reads /metrics at
  // once, and must find it counted.
  metrics_.tokens(0, static_cast<int64_t>(sampled.size()));
  std::vector<int64_t> models;  // the base (-1) and the adapters this step's rows ran with
  for (const auto& row : rows)
    if (std::find(models.begin(), models.end(), row.adapter) == models.end()) models.push_back(row.adapter);
  metrics_.step(static_cast<int64_t>(running_.size()), static_cast<int64_t>(sampled.size()),
                static_cast<int64_t>(models.size()));
  std::vector<std::pair<std::shared_ptr<RequestState>, SequenceEvent>> events;
  for (size_t k = 0; k < sampled.size(); ++k) {
    Running& r = running_[sampled[k]];
    StepResult result = r.sequence->accept(logits.data_ptr<float>() + static_cast<int64_t>(k) * vocab, vocab);
    if (!r.request->first_token_) {
      r.request->first_token_ = true;
      metrics_.first_token(std::chrono::duration<double>(now - r.request->submitted_).count());
    }
    events.emplace_back(r.request, SequenceEvent{r.choice, std::move(result)});
  }
  // Finished sequences give back their slots and cache before their clients hear of the end, so
  // a client that reads /metrics next finds them returned.
  retire_finished();
  for (auto& [request, event] : events) {
    const bool finished = event.step.finish != Finish::None;
    request->push(std::move(event), finished);
  }
  // The batch's size changes as requests come and go, and with it the blocks a step takes:
  // every 64 steps those no step took since the last trim go back to the system.
  if (++steps_ % 64 == 0) cpu_block_cache::trim_unused();
}

void Scheduler::loop() {
  at::set_num_threads(static_cast<int>(options_.threads));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running_.empty(); });
      if (stopping_) return;
      // Only an idle server's first requests wait for a batch: requests left queued by the last
      // admission (no slots or cache then) already waited, and start as soon as there is room.
      if (running_.empty() && options_.batch_wait_ms > 0 && !held_back_) {
        const auto until = Clock::now() + std::chrono::milliseconds(options_.batch_wait_ms);
        cv_.wait_until(lock, until,
                       [&] { return stopping_ || draining_ || queued_sequences() >= options_.max_batch; });
        if (stopping_) return;
      }
      admit();
      publish_state();
    }
    drop_cancelled();
    try {
      step();
    } catch (const std::exception& e) {
      // A failed step leaves the caches in an unknown state: every running request ends.
      log::error(str("serve: decoding step failed: ", e.what()));
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& r : running_) {
        r.request->fail(str("decoding failed: ", e.what()));
        release(r);
      }
      running_.clear();
    }
    retire_finished();
    cv_.notify_all();  // wait_idle()
  }
}

}  // namespace cadre
