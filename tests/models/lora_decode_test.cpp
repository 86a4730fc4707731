// LoRA adapters in the KV-cache decoder (models/llama/decode_adapters.h, what `cadre serve
// --lora` serves): two adapters (every projection at rank 4; q, v and down at rank 2) and the
// base decode four sequences together (two of them with the first adapter, whose rows then go
// through its products together), each row with its own model, and every logit is the same bits
// as the sequence decoded alone; an adapter's logits equal the training forward of
// the model with that adapter (models/lora.h) to float32 rounding, as the base's do without;
// adapters that do not fit the model are refused naming the factor.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "models/llama/decode.h"
#include "models/llama/llama_model.h"
#include "models/lora.h"
#include "support/tiny_llama.h"

namespace {

// The tiny Llama with the base's weights (seed 3) and an adapter of `rank` on `targets`, B random.
std::unique_ptr<cadre::LlamaModel> adapted(const std::string& targets, int64_t rank, uint64_t seed) {
  auto model = std::make_unique<cadre::LlamaModel>(cadre::test::tiny_llama_config());
  cadre::LoraConfig lora;
  lora.rank = rank;
  lora.alpha = 2.0 * double(rank);
  lora.targets = targets;
  cadre::lora_apply(model->llama(), lora, model->lora_names());
  model->llama().init_weights(3);
  cadre::lora_init_adapters(model->llama(), seed);
  c10::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& p : model->llama().named_parameters())
    if (cadre::ends_with(p.key(), ".lora_b")) p.value().normal_(0, 0.05, gen);
  return model;
}

cadre::LoraWeights weights_of(const std::string& name, cadre::Llama& model, double scale) {
  cadre::LoraWeights w;
  w.name = name;
  w.scale = scale;
  for (const auto& p : model.named_parameters())
    if (cadre::lora_is_adapter(p.key())) w.factors[p.key()] = p.value().detach().clone();
  return w;
}

struct Served {
  std::unique_ptr<cadre::LlamaModel> base, first, second;
  cadre::LoraWeights w1, w2;
  Served()
      : base(adapted("wq", 1, 1)),  // only its base weights are read (the decoder takes no adapter from a model)
        first(adapted("all-linear", 4, 5)),
        second(adapted("q_proj,v_proj,down_proj", 2, 6)),
        w1(weights_of("first", first->llama(), 2.0)),
        w2(weights_of("second", second->llama(), 2.0)) {}
  std::unique_ptr<cadre::LlamaDecoder> decoder(int64_t slots) const {
    auto d = std::make_unique<cadre::LlamaDecoder>(base->llama(), cadre::DecodeOptions{slots, 0, at::kFloat});
    EXPECT_EQ(d->add_adapter(w1), 0);
    EXPECT_EQ(d->add_adapter(w2), 1);
    return d;
  }
};

// Each sequence's prompt in one call, then `steps` calls of one (given) token: the logits of
// every call, per sequence. `sequences`: (adapter, tokens) in slots 0, 1, ...
std::vector<std::vector<at::Tensor>> decode(cadre::Decoder& d, const std::vector<std::pair<int64_t, at::Tensor>>& seqs,
                                            int64_t prompt) {
  std::vector<std::vector<at::Tensor>> out(seqs.size());
  std::vector<cadre::DecodeRow> rows;
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int64_t k = 0; k < prompt; ++k)
      rows.push_back({int64_t(s), seqs[s].second[k].item<int64_t>(), k + 1 == prompt, seqs[s].first});
  at::Tensor logits = d.forward(rows);
  for (size_t s = 0; s < seqs.size(); ++s) out[s].push_back(logits[int64_t(s)].clone());
  for (int64_t k = prompt; k < seqs[0].second.size(0); ++k) {
    rows.clear();
    for (size_t s = 0; s < seqs.size(); ++s) rows.push_back({int64_t(s), seqs[s].second[k].item<int64_t>(), true, seqs[s].first});
    logits = d.forward(rows);
    for (size_t s = 0; s < seqs.size(); ++s) out[s].push_back(logits[int64_t(s)].clone());
  }
  return out;
}

TEST(LoraDecode, MixedBatchesEqualEachSequenceAloneAndTheTrainingForward) {
  at::set_num_threads(2);
  const Served served;
  // The base, the first adapter twice (its rows go through its products together), the second.
  const std::vector<int64_t> adapter_of = {-1, 0, 0, 1};
  std::vector<std::pair<int64_t, at::Tensor>> seqs;
  for (size_t s = 0; s < adapter_of.size(); ++s)
    seqs.push_back({adapter_of[s], at::randint(96, {12}, at::make_generator<at::CPUGeneratorImpl>(20 + s), at::kLong)});
  auto together_decoder = served.decoder(int64_t(seqs.size()));
  const auto together = decode(*together_decoder, seqs, 6);
  const std::vector<cadre::Llama*> by_adapter = {&served.base->llama(), &served.first->llama(), &served.second->llama()};
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto alone_decoder = served.decoder(1);
    const auto alone = decode(*alone_decoder, {seqs[s]}, 6)[0];
    ASSERT_EQ(alone.size(), together[s].size());
    for (size_t k = 0; k < alone.size(); ++k)
      EXPECT_TRUE(at::equal(alone[k], together[s][k])) << "sequence " << s << " (adapter " << seqs[s].first
                                                       << ") call " << k << ": batched differs from alone";
    // The training forward of the model with that adapter (the base: the adapter-free forward).
    at::Tensor full;
    {
      c10::NoGradGuard no_grad;
      cadre::Llama& m = *by_adapter[size_t(seqs[s].first + 1)];
      if (seqs[s].first < 0) {  // the base model's own adapter (wq) would add a delta: switch it off with B = 0
        for (auto& p : m.named_parameters())
          if (cadre::ends_with(p.key(), ".lora_b")) p.value().zero_();
      }
      full = m.forward(seqs[s].second.unsqueeze(0)).squeeze(0);
    }
    for (size_t k = 0; k < alone.size(); ++k) {
      const at::Tensor want = full[int64_t(5 + k)];
      const double err = (alone[k] - want).abs().max().item<double>() / want.abs().max().item<double>();
      EXPECT_LT(err, 1e-5) << "sequence " << s << " position " << 5 + k;
    }
  }
  // The adapters move the logits: the comparison is not between equal things.
  EXPECT_GT((together[1][0] - together[0][0]).abs().max().item<double>(), 1e-3);
}

TEST(LoraDecode, AdaptersThatDoNotFitAreConfigErrors) {
  const Served served;
  auto d = served.decoder(1);
  auto refused = [&](cadre::LoraWeights w, const std::string& says) {
    try {
      d->add_adapter(w);
      ADD_FAILURE() << says << ": accepted";
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  cadre::LoraWeights head = served.w2;
  head.factors["output.lora_a"] = at::zeros({2, 64});
  refused(head, "has 'output.lora_a': served adapters apply to the blocks' projections only");
  cadre::LoraWeights shape = served.w2;
  shape.factors["layers.0.attention.wq.lora_a"] = at::zeros({2, 32});
  refused(shape, "layers.0.attention.wq.lora_a is [2, 32], which does not fit");
  cadre::LoraWeights unpaired = served.w2;
  unpaired.factors.erase("layers.1.feed_forward.w2.lora_b");
  refused(unpaired, "a factor of block 1 has no partner");
  EXPECT_THROW(d->forward({{0, 1, true, 2}}), cadre::Error);  // no adapter 2
}

}  // namespace
