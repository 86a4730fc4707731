// A sequence's state machine: sample, detokenize, stop.
#include "generate/sequence.h"

#include <algorithm>

#include "core/error.h"

namespace cadre {

const char* finish_reason(Finish f) { return f == Finish::Length ? "length" : f == Finish::Stop ? "stop" : ""; }

Sequence::Sequence(const Tokenizer& tokenizer, std::vector<int> prompt, GenerationParams params, int64_t context,
                   uint64_t seed)
    : tokenizer_(tokenizer),
      tokens_(std::move(prompt)),
      prompt_len_(static_cast<int64_t>(tokens_.size())),
      params_(std::move(params)),
      context_(context),
      eos_(tokenizer.eos_ids()),
      tokenizer_vocab_(tokenizer.vocab_size()),
      rng_(seed),
      stream_(tokenizer, tokens_, params_.stop) {
  CADRE_CHECK(prompt_len_ >= 1, "a sequence needs at least one prompt token");
  CADRE_CHECK(prompt_len_ < context_, "the prompt (", prompt_len_, " tokens) leaves no room in a context of ", context_);
}

std::vector<int> Sequence::pending_tokens(int64_t limit) const {
  const int64_t n = std::min<int64_t>(limit, static_cast<int64_t>(tokens_.size()) - fed_);
  return {tokens_.begin() + fed_, tokens_.begin() + fed_ + std::max<int64_t>(n, 0)};
}

StepResult Sequence::accept(const float* logits, int64_t vocab) {
  CADRE_CHECK(!finished(), "accept() on a finished sequence");
  CADRE_CHECK(fed_ == static_cast<int64_t>(tokens_.size()), "accept() before every token was fed");
  // A model whose vocabulary is padded beyond the tokenizer's never picks the padding.
  vocab = std::min(vocab, tokenizer_vocab_);
  scratch_.assign(logits, logits + vocab);
  StepResult out;
  out.token = sample_token(scratch_, params_.sampling, tokens_, rng_);
  if (params_.logprobs >= 0) out.logprob = token_logprobs(logits, vocab, out.token, params_.logprobs);
  tokens_.push_back(static_cast<int>(out.token));
  const bool eos = std::find(eos_.begin(), eos_.end(), static_cast<int>(out.token)) != eos_.end();
  if (eos && !params_.ignore_eos) {
    out.text = stream_.flush();
    finish_ = Finish::Stop;
  } else {
    out.text = stream_.push(static_cast<int>(out.token));
    if (stream_.stopped()) finish_ = Finish::Stop;
  }
  if (finish_ == Finish::None &&
      (generated_tokens() >= params_.max_tokens || static_cast<int64_t>(tokens_.size()) >= context_)) {
    out.text += stream_.flush();
    finish_ = Finish::Length;
  }
  out.finish = finish_;
  return out;
}

}  // namespace cadre
