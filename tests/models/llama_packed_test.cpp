// Packed windows (Batch::documents): a window holding several documents, each attending only to
// itself with positions from 0, gives the loss and gradients of the same documents each in a
// window of its own, padded. Judged against the unpacked computation in float64
// (fp64_judge.h): the packed float32 error may be at most 4x the unpacked float32 runs' own
// (two paddings, so two orders of float32 sums; the judge's "PyTorch" column is those runs). A
// packed window that attended across documents is off by whole terms, far past that. Positions
// that kept counting across a window would not be: rotary attention depends only on the
// distance between positions, so restarting them changes rounding alone (tried: ratio 1.23).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "fp64_judge.h"
#include "models/llama/model.h"
#include "support/tiny_llama.h"

namespace {

// One document: its input tokens and the target at each (its next token, or -100 where nothing
// is learned).
struct Document {
  at::Tensor input, target;
};

std::vector<Document> make_documents(const std::vector<int64_t>& lengths) {
  at::manual_seed(7);
  std::vector<Document> docs;
  for (int64_t length : lengths) {
    const at::Tensor tokens = at::randint(1, 96, {length + 1}, at::kLong);
    at::Tensor target = tokens.narrow(0, 1, length).clone();
    target.masked_fill_(at::rand({length}) < 0.3, -100);  // prompt tokens, not learned
    docs.push_back({tokens.narrow(0, 0, length).clone(), target});
  }
  return docs;
}

struct Result {
  at::Tensor loss;
  std::map<std::string, at::Tensor> grads;
};

Result loss_and_grads(cadre::Llama& model, const at::Tensor& input, const at::Tensor& target,
                      const std::vector<std::vector<int64_t>>& documents) {
  model.zero_grad();
  at::Tensor loss = cadre::llama_loss(model.forward(input, documents), target);
  loss.backward();
  Result r{loss.detach(), {}};
  for (const auto& p : model.named_parameters()) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

// The documents tiled into windows of T as `layout` says (document indices per window).
std::pair<at::Tensor, at::Tensor> packed(const std::vector<Document>& docs,
                                         const std::vector<std::vector<size_t>>& layout) {
  std::vector<at::Tensor> inputs, targets;
  for (const auto& window : layout) {
    std::vector<at::Tensor> in, tg;
    for (size_t d : window) {
      in.push_back(docs[d].input);
      tg.push_back(docs[d].target);
    }
    inputs.push_back(at::cat(in));
    targets.push_back(at::cat(tg));
  }
  return {at::stack(inputs), at::stack(targets)};
}

// Each document alone in a window of `width`, padded with token 0 and target -100.
std::pair<at::Tensor, at::Tensor> padded(const std::vector<Document>& docs, int64_t width) {
  at::Tensor input = at::zeros({static_cast<int64_t>(docs.size()), width}, at::kLong);
  at::Tensor target = at::full({static_cast<int64_t>(docs.size()), width}, -100, at::kLong);
  for (size_t d = 0; d < docs.size(); ++d) {
    const int64_t n = docs[d].input.size(0);
    input[d].narrow(0, 0, n).copy_(docs[d].input);
    target[d].narrow(0, 0, n).copy_(docs[d].target);
  }
  return {input, target};
}

TEST(LlamaPacked, PackedDocumentsGiveTheUnpackedLossAndGradients) {
  const std::vector<int64_t> lengths = {5, 9, 2, 16, 3, 4, 6, 3};
  const std::vector<std::vector<size_t>> layout = {{0, 1, 2}, {3}, {4, 5, 6, 7}};  // windows of 16
  const std::vector<Document> docs = make_documents(lengths);
  std::vector<std::vector<int64_t>> documents;
  for (const auto& window : layout) {
    documents.emplace_back();
    for (size_t d : window) documents.back().push_back(lengths[d]);
  }
  cadre::Llama model32(cadre::test::tiny_llama_config());
  model32.init_weights(3);
  cadre::Llama model64(cadre::test::tiny_llama_config());
  model64.init_weights(3);
  model64.to(at::kDouble);

  const auto [pin, ptg] = packed(docs, layout);
  const Result got = loss_and_grads(model32, pin, ptg, documents);
  const auto [in16, tg16] = padded(docs, 16);
  const auto [in24, tg24] = padded(docs, 24);
  const Result ref = loss_and_grads(model64, in16, tg16, {});
  const Result pad16 = loss_and_grads(model32, in16, tg16, {});
  const Result pad24 = loss_and_grads(model32, in24, tg24, {});

  cadre::test::Fp64Judge judge("[llama packed]");
  judge.check("loss", "loss", got.loss, {pad16.loss, pad24.loss}, ref.loss);
  for (const auto& [name, g] : got.grads) judge.check("gradients", name, g, {pad16.grads.at(name), pad24.grads.at(name)}, ref.grads.at(name));
  judge.print();

  // Without the document lists the same windows attend across documents: the loss moves by far
  // more than the bound (the check above would catch a packing that did this).
  c10::NoGradGuard no_grad;
  const double crossed = cadre::llama_loss(model32.forward(pin), ptg).item<double>();
  EXPECT_GT(std::abs(crossed - ref.loss.item<double>()), 1e3 * cadre::test::kFloor * std::abs(ref.loss.item<double>()));
}

TEST(LlamaPacked, DocumentsThatDoNotTileTheWindowAreRefused) {
  cadre::Llama model(cadre::test::tiny_llama_config());
  model.init_weights(3);
  c10::NoGradGuard no_grad;
  const at::Tensor tokens = at::ones({2, 8}, at::kLong);
  EXPECT_THROW(model.forward(tokens, {{8}}), cadre::Error);          // one list for two windows
  EXPECT_THROW(model.forward(tokens, {{8}, {3, 4}}), cadre::Error);  // 7 of 8 tokens
  EXPECT_THROW(model.forward(tokens, {{8}, {0, 8}}), cadre::Error);  // an empty document
  EXPECT_EQ(model.forward(tokens, {{8}, {3, 5}}).sizes(), (std::vector<int64_t>{2, 8, 96}));
}

}  // namespace
