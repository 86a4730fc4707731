// The KV-cache decoder against the training forward, and its batch invariance.
//
// - Logits from the cache, position by position, equal the full-sequence forward's
//   (models/llama/model.h) to 1e-5 relative to their largest magnitude: both are float32 with
//   different summation orders (the decoder's own kernel vs OpenBLAS, whose kernel depends on
//   the CPU). Forward only, so no step amplifies rounding: a float32 forward of a model this
//   size stays within 4e-7 of float64 on every kernel choice measured (llama_parity_test.cpp's
//   logits), so two differ by under 1e-6 and 1e-5 leaves 10x; the gap here measured at most
//   5.1e-7 over 18 combinations of OpenBLAS core type and ATen capability.
// - The batch-invariant linear is judged against float64, as the parity tests are
//   (fp64_judge.h): its error at most 4x that of at::matmul (OpenBLAS, whose error ranged
//   2.6e-7 to 7.5e-7 by core type for K = 333), not a fixed gap to it.
// - The tensor-operation decoder (decode_device.h, what a GPU runs) on the CPU against the
//   batch-invariant one: the same float32 forward in other summation orders, so the same 1e-5
//   bound relative to the largest logit, and the same greedy tokens.
// - Bit for bit: a prompt fed in one call or token by token; a sequence decoded alone or in
//   one forward with other sequences at other positions; the AVX-512 and the portable kernels;
//   with bf16 weights, the bf16 dot products (the CPU's instruction, FMAs, portable code) and a
//   reference written from the instruction's definition.
// - The cache grows in blocks as sequences do and is freed at reset; positions past a block
//   boundary still match the training forward, and a bf16 cache keeps every bit-for-bit
//   property.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "models/batch_invariant_linear.h"
#include "models/llama/decode.h"
#include "models/llama/decode_device.h"
#include "models/llama/model.h"
#include "fp64_judge.h"

namespace {

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

cadre::LlamaConfig small_config(bool tied, int64_t kv_heads) {
  cadre::LlamaConfig c;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = kv_heads;
  c.vocab_size = 300;
  c.multiple_of = 32;
  c.max_seq_len = 96;
  c.rope_theta = 500000;
  c.tie_embeddings = tied;
  return c;
}

at::Tensor random_tokens(int64_t vocab, int64_t n, uint64_t seed) {
  return at::randint(vocab, {n}, at::make_generator<at::CPUGeneratorImpl>(seed), at::kLong);
}

// Logits of every position, feeding `chunk` tokens per call.
at::Tensor decode_all(cadre::Decoder& decoder, int64_t slot, const at::Tensor& tokens, int64_t chunk) {
  decoder.reset(slot);
  std::vector<at::Tensor> parts;
  for (int64_t i = 0; i < tokens.size(0); i += chunk) {
    std::vector<cadre::DecodeRow> rows;
    for (int64_t k = i; k < std::min(tokens.size(0), i + chunk); ++k) rows.push_back({slot, tokens[k].item<int64_t>(), true});
    parts.push_back(decoder.forward(rows));
  }
  return at::cat(parts, 0);
}

class LlamaDecode : public ::testing::TestWithParam<std::tuple<bool, int64_t>> {};

TEST_P(LlamaDecode, CachedLogitsEqualFullSequenceLogitsAtEveryPosition) {
  at::set_num_threads(2);
  const auto [tied, kv] = GetParam();
  cadre::Llama model(small_config(tied, kv));
  model.init_weights(11);
  const at::Tensor tokens = random_tokens(300, 80, 5);
  at::Tensor full;
  {
    c10::NoGradGuard no_grad;
    full = model.forward(tokens.unsqueeze(0)).squeeze(0);
  }
  cadre::LlamaDecoder decoder(model, {1, 0, at::kFloat});
  const at::Tensor stepwise = decode_all(decoder, 0, tokens, 1);
  ASSERT_EQ(stepwise.sizes(), full.sizes());
  double worst = 0;
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    const double err = relative_error(stepwise[t], full[t]);
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-5) << "position " << t;
  }
  std::printf("max relative error over %lld positions: %.2e\n", static_cast<long long>(tokens.size(0)), worst);
  // The same tokens fed as one prompt, or in chunks of 7, give the same bits.
  EXPECT_TRUE(at::equal(decode_all(decoder, 0, tokens, tokens.size(0)), stepwise));
  EXPECT_TRUE(at::equal(decode_all(decoder, 0, tokens, 7), stepwise));
}

INSTANTIATE_TEST_SUITE_P(TiedAndGrouped, LlamaDecode,
                         ::testing::Values(std::make_tuple(false, int64_t{2}), std::make_tuple(true, int64_t{4})));

TEST(LlamaDecodeBatch, SequencesGiveTheSameBitsAloneOrBatchedWithOthers) {
  at::set_num_threads(2);
  cadre::Llama model(small_config(false, 2));
  model.init_weights(3);
  const int64_t S = 8;
  cadre::LlamaDecoder decoder(model, {S, 0, at::kFloat});
  std::vector<at::Tensor> prompts, alone;
  for (int64_t s = 0; s < S; ++s) {
    prompts.push_back(random_tokens(300, 10 + 7 * s, 100 + s));
    alone.push_back(decode_all(decoder, s, prompts[s], 1));
  }
  // Now all at once: each call takes one more token from every sequence (so the rows are at
  // different positions), and sequence s also gets s extra tokens at once on its first call.
  for (int64_t s = 0; s < S; ++s) decoder.reset(s);
  std::vector<std::vector<at::Tensor>> got(S);
  std::vector<int64_t> next(S, 0);
  for (bool more = true; more;) {
    more = false;
    std::vector<cadre::DecodeRow> rows;
    std::vector<int64_t> owner;
    for (int64_t s = S - 1; s >= 0; --s) {  // reversed order on purpose
      const int64_t take = next[s] == 0 ? s + 1 : 1;
      for (int64_t k = 0; k < take && next[s] < prompts[s].size(0); ++k) {
        rows.push_back({s, prompts[s][next[s]++].item<int64_t>(), true});
        owner.push_back(s);
      }
      more = more || next[s] < prompts[s].size(0);
    }
    at::Tensor logits = decoder.forward(rows);
    for (size_t i = 0; i < owner.size(); ++i) got[owner[i]].push_back(logits[static_cast<int64_t>(i)]);
  }
  for (int64_t s = 0; s < S; ++s) EXPECT_TRUE(at::equal(at::stack(got[s]), alone[s])) << "sequence " << s;
}

// Greedy decoding of `steps` tokens after `prompt` (fed in one call).
std::vector<int64_t> greedy_tokens(cadre::Decoder& decoder, int64_t slot, const at::Tensor& prompt, int64_t steps) {
  decoder.reset(slot);
  std::vector<cadre::DecodeRow> rows;
  for (int64_t k = 0; k < prompt.size(0); ++k) rows.push_back({slot, prompt[k].item<int64_t>(), k + 1 == prompt.size(0)});
  std::vector<int64_t> out;
  for (int64_t i = 0; i < steps; ++i) {
    out.push_back(decoder.forward(rows).argmax(-1).item<int64_t>());
    rows = {{slot, out.back(), true}};
  }
  return out;
}

TEST_P(LlamaDecode, DeviceDecoderOnTheCpuMatchesTheBatchInvariantOne) {
  at::set_num_threads(2);
  const auto [tied, kv] = GetParam();
  cadre::Llama model(small_config(tied, kv));
  model.init_weights(12);
  cadre::DecodeOptions options{3, 0, at::kFloat, c10::Device(c10::kCPU)};
  cadre::LlamaDecoder reference(model, options);
  cadre::LlamaDeviceDecoder device(model, options);
  const at::Tensor tokens = random_tokens(300, 60, 6);
  // Token by token, in one call, and in chunks (rows of one slot attending within a call).
  const at::Tensor want = decode_all(reference, 1, tokens, 1);
  for (int64_t chunk : {int64_t{1}, int64_t{60}, int64_t{7}}) {
    const at::Tensor got = decode_all(device, 1, tokens, chunk);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.device().is_cpu());
    for (int64_t t = 0; t < tokens.size(0); ++t)
      EXPECT_LT(relative_error(got[t], want[t]), 1e-5) << "chunk " << chunk << ", position " << t;
  }
  // Two slots in one call at different positions: each row sees only its own slot.
  device.reset(0);
  device.reset(2);
  std::vector<cadre::DecodeRow> rows;
  for (int64_t k = 0; k < 9; ++k) rows.push_back({2, tokens[k].item<int64_t>(), true});
  for (int64_t k = 0; k < 4; ++k) rows.push_back({0, tokens[k].item<int64_t>(), true});
  const at::Tensor mixed = device.forward(rows);
  for (int64_t k = 0; k < 9; ++k) EXPECT_LT(relative_error(mixed[k], want[k]), 1e-5) << "slot 2, position " << k;
  for (int64_t k = 0; k < 4; ++k) EXPECT_LT(relative_error(mixed[9 + k], want[k]), 1e-5) << "slot 0, position " << k;
  EXPECT_EQ(device.length(2), 9);
  EXPECT_EQ(device.length(0), 4);
  EXPECT_EQ(greedy_tokens(device, 0, tokens.narrow(0, 0, 12), 30), greedy_tokens(reference, 0, tokens.narrow(0, 0, 12), 30));
}

TEST(LlamaDecodeDevice, Bf16WeightsTakeTheSameBytesAndStayCloseToTheBatchInvariantDecoders) {
  at::set_num_threads(2);
  cadre::Llama model(small_config(false, 2));
  model.init_weights(1);
  cadre::LlamaDeviceDecoder device(model, {1, 0, at::kBFloat16, c10::Device(c10::kCPU)});
  cadre::LlamaDecoder reference(model, {1, 0, at::kBFloat16});
  EXPECT_EQ(device.weight_bytes(), reference.weight_bytes());
  EXPECT_EQ(device.cache_bytes_per_token(), reference.cache_bytes_per_token());
  EXPECT_EQ(device.cache_bytes(), 96 * device.cache_bytes_per_token()) << "the device's cache is allocated up front";
  EXPECT_EQ(reference.cache_bytes(), 0) << "the CPU's cache grows with the sequences";
  // Both use the same bf16-rounded weights, bf16 caches and bf16-rounded matrix inputs; the
  // tensor path also rounds each matrix's output to bf16 (what a bf16 matmul returns): 2^-9
  // relative per element, once for each of the 9 matrices a token passes (4 per layer, the head),
  // so even all aligned under 9 x 2^-9 = 1.8e-2 of the largest logit; measured 4.0e-3.
  const at::Tensor tokens = random_tokens(300, 40, 9);
  const at::Tensor got = decode_all(device, 0, tokens, 5), want = decode_all(reference, 0, tokens, 1);
  double worst = 0;
  for (int64_t t = 0; t < tokens.size(0); ++t) worst = std::max(worst, relative_error(got[t], want[t]));
  std::printf("bf16: max relative error over %lld positions: %.2e\n", static_cast<long long>(tokens.size(0)), worst);
  EXPECT_LT(worst, 3e-2);
}

TEST(BatchInvariantLinear, RowsEqualAloneAndMatchMatmul) {
  at::set_num_threads(2);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  for (int64_t K : {64, 100, 333}) {
    const at::Tensor x = at::randn({37, K}, gen), w = at::randn({53, K}, gen);
    const at::Tensor all = cadre::batch_invariant_linear(x, w);
    const at::Tensor exact = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
    const cadre::test::Fp64Errors e = cadre::test::fp64_errors(all, {at::matmul(x, w.t())}, exact);
    EXPECT_LE(e.ratio(), cadre::test::kFactor)
        << "K " << K << ": error vs float64 " << e.cadre << ", at::matmul's " << e.torch;
    std::printf("K %lld: error vs float64 %.2e, at::matmul's %.2e\n", static_cast<long long>(K), e.cadre, e.torch);
    for (int64_t m : {0, 5, 36})
      EXPECT_TRUE(at::equal(cadre::batch_invariant_linear(x.narrow(0, m, 1).contiguous(), w), all.narrow(0, m, 1))) << m;
    // The portable path gives the same bits as the vector one.
    cadre::batch_invariant_linear_limit(cadre::KernelPath::Portable);
    const at::Tensor portable = cadre::batch_invariant_linear(x, w);
    cadre::batch_invariant_linear_limit(cadre::KernelPath::Best);
    EXPECT_TRUE(at::equal(portable, all)) << "K " << K << " (vector path: " << cadre::batch_invariant_linear_isa() << ")";
  }
}

namespace bf16_reference {

// VDPBF16PS as Intel's and AMD's manuals define it, written out here apart from the kernels: x
// rounded to bf16 (libtorch's conversion: nearest, ties to even; the inputs here are normal),
// lane j of each block of 32 adds the product of the odd element of pair j, then the even's, each
// sum rounded once (the product of two bf16 values is exact in float32); lanes summed by the tree
// (0+8, 4, 2, 1).
float dot(const at::Tensor& xb, const at::Tensor& wb) {
  const at::Tensor xf = xb.to(at::kFloat), wf = wb.to(at::kFloat);
  const float* a = xf.data_ptr<float>();
  const float* b = wf.data_ptr<float>();
  const int64_t K = xf.numel();
  const auto at_k = [&](const float* v, int64_t k) { return k < K ? v[k] : 0.0f; };
  float lane[16] = {};
  for (int64_t k0 = 0; k0 < K; k0 += 32)
    for (int j = 0; j < 16; ++j) {
      const int64_t k = k0 + 2 * j;
      lane[j] = std::fma(at_k(a, k + 1), at_k(b, k + 1), lane[j]);
      lane[j] = std::fma(at_k(a, k), at_k(b, k), lane[j]);
    }
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  return lane[0];
}

}  // namespace bf16_reference

// bfloat16 weights: x rounded to bfloat16 and pairs summed as VDPBF16PS defines, bit for bit on
// every path this CPU has (the instruction itself where the CPU has it, FMAs with the flush modes
// on AVX-512, portable code), whatever rows are computed together; and within the rounding bound
// of float64: the rounding of x (2^-9 relative per element) plus K additions of 2^-24 each, both
// times sum |x w|.
TEST(BatchInvariantLinear, Bf16WeightsAddBf16PairsTheSameOnEveryPath) {
  at::set_num_threads(2);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  for (int64_t K : {31, 64, 100, 333, 1000}) {
    const at::Tensor x = at::randn({9, K}, gen) * at::exp(at::randn({9, 1}, gen)), w = at::randn({13, K}, gen);
    const at::Tensor wb = w.to(at::kBFloat16), xb = x.to(at::kBFloat16);
    at::Tensor want = at::empty({9, 13}, at::kFloat);
    for (int64_t m = 0; m < 9; ++m)
      for (int64_t n = 0; n < 13; ++n) want[m][n] = bf16_reference::dot(xb[m], wb[n]);
    for (auto path : {cadre::KernelPath::Best, cadre::KernelPath::Avx512, cadre::KernelPath::Portable}) {
      cadre::batch_invariant_linear_limit(path);
      const at::Tensor got = cadre::batch_invariant_linear(x, wb);
      EXPECT_TRUE(at::equal(got, want)) << "K " << K << " on " << cadre::batch_invariant_linear_isa() << ": max diff "
                                        << (got - want).abs().max().item<double>();
      for (int64_t m : {0, 4, 8})
        EXPECT_TRUE(at::equal(cadre::batch_invariant_linear(x.narrow(0, m, 1).contiguous(), wb), got.narrow(0, m, 1)))
            << "K " << K << " row " << m << " on " << cadre::batch_invariant_linear_isa();
    }
    cadre::batch_invariant_linear_limit(cadre::KernelPath::Best);
    const at::Tensor xd = x.to(at::kDouble), wd = wb.to(at::kDouble);
    const at::Tensor exact = xd.matmul(wd.t()), magnitude = xd.abs().matmul(wd.abs().t());
    const at::Tensor bound = magnitude * (std::ldexp(1.0, -9) + double(K) * std::ldexp(1.0, -24));
    EXPECT_TRUE(((want.to(at::kDouble) - exact).abs() <= bound).all().item<bool>()) << "K " << K;
  }
  std::printf("bf16 weights on this CPU: %s kernels\n", cadre::batch_invariant_linear_isa());
}

// Inputs and sums below 2^-126 count as zero, as VDPBF16PS takes them, on every path.
TEST(BatchInvariantLinear, Bf16SubnormalsCountAsZeroOnEveryPath) {
  const float tiny = std::ldexp(1.0f, -130);  // a subnormal float32 and bfloat16
  at::Tensor x = at::full({1, 40}, 1.0f), w = at::full({2, 40}, 0.5f);
  x[0][3] = tiny;                 // an input that counts as 0
  w[1][5] = tiny;                 // a weight that counts as 0
  x[0][7] = std::ldexp(1.0f, -70);  // row 0: a product of 2^-141; row 1: 2^-71, lost beside 0.5
  w[0][7] = std::ldexp(1.0f, -71);
  const at::Tensor wb = w.to(at::kBFloat16);
  for (auto path : {cadre::KernelPath::Best, cadre::KernelPath::Avx512, cadre::KernelPath::Portable}) {
    cadre::batch_invariant_linear_limit(path);
    const at::Tensor y = cadre::batch_invariant_linear(x, wb);
    EXPECT_EQ(y[0][0].item<float>(), 19.0f) << cadre::batch_invariant_linear_isa();  // 38 halves (3 and 7 out)
    EXPECT_EQ(y[0][1].item<float>(), 18.5f) << cadre::batch_invariant_linear_isa();  // 37 halves (3, 5 and 7 out)
    // Subnormal inputs alone: 40 products of 2^-131 each (not 0 in float32's gradual underflow).
    const at::Tensor alone = cadre::batch_invariant_linear(at::full({1, 40}, tiny), wb);
    EXPECT_EQ(alone.abs().max().item<float>(), 0.0f) << cadre::batch_invariant_linear_isa();
  }
  cadre::batch_invariant_linear_limit(cadre::KernelPath::Best);
}

// The attention scores' batched dots are the single dot, bit for bit, on both paths, for every
// count (whole tiles of four and a remainder) and lengths that do and do not fill the lanes.
TEST(BatchInvariantLinear, DotsOfOneVectorWithManyRowsEqualOneDotEach) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  for (int64_t n : {16, 64, 37}) {
    const at::Tensor a = at::randn({n}, gen), rows = at::randn({11, n}, gen);
    for (bool portable : {false, true}) {
      cadre::batch_invariant_linear_limit(portable ? cadre::KernelPath::Portable : cadre::KernelPath::Best);
      for (int64_t count : {1, 4, 7, 11}) {
        std::vector<float> dots(static_cast<size_t>(count));
        cadre::batch_invariant_dots(a.data_ptr<float>(), rows.data_ptr<float>(), count, n, dots.data());
        for (int64_t j = 0; j < count; ++j) {
          const float one = cadre::batch_invariant_dot(a.data_ptr<float>(), rows.data_ptr<float>() + j * n, n);
          EXPECT_EQ(std::memcmp(&one, &dots[static_cast<size_t>(j)], sizeof(float)), 0)
              << "n " << n << " count " << count << " row " << j << " portable " << portable;
        }
      }
      cadre::batch_invariant_linear_limit(cadre::KernelPath::Best);
    }
    // And the dots are dot products: within float32 rounding of the float64 ones.
    const at::Tensor exact = at::matmul(rows.to(at::kDouble), a.to(at::kDouble));
    std::vector<float> dots(11);
    cadre::batch_invariant_dots(a.data_ptr<float>(), rows.data_ptr<float>(), 11, n, dots.data());
    // |error| <= n u sum |a_i b_i| for any summation order (u = 2^-24).
    const at::Tensor magnitudes = rows.abs().to(at::kDouble).matmul(a.abs().to(at::kDouble));
    const double bound = double(n) * std::ldexp(1.0, -24) * magnitudes.max().item<double>();
    for (int64_t j = 0; j < 11; ++j) EXPECT_NEAR(dots[static_cast<size_t>(j)], exact[j].item<double>(), bound) << j;
  }
}

// A LoRA row update: the vector and portable paths give the same bits for outputs that do and
// do not fill the lanes, and the result is y + scale B (A x) within float32 rounding.
TEST(BatchInvariantLinear, LowRankAddIsTheSameOnBothPathsAndCloseToFloat64) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
  const int64_t rank = 8, in = 37;
  for (int64_t out : {16, 53}) {
    const at::Tensor x = at::randn({in}, gen), a = at::randn({rank, in}, gen), bt = at::randn({rank, out}, gen),
                     y0 = at::randn({out}, gen);
    const float scale = 0.75f;
    std::vector<at::Tensor> results;
    for (bool portable : {false, true}) {
      cadre::batch_invariant_linear_limit(portable ? cadre::KernelPath::Portable : cadre::KernelPath::Best);
      at::Tensor y = y0.clone();
      std::vector<float> h(rank);
      cadre::batch_invariant_lowrank_add(x.data_ptr<float>(), a, bt, scale, h.data(), y.data_ptr<float>());
      results.push_back(y);
      // bfloat16 factors: exactly the float32 update with the factors rounded to bfloat16.
      at::Tensor yb = y0.clone(), yr = y0.clone();
      cadre::batch_invariant_lowrank_add(x.data_ptr<float>(), a.to(at::kBFloat16), bt.to(at::kBFloat16), scale, h.data(),
                                         yb.data_ptr<float>());
      cadre::batch_invariant_lowrank_add(x.data_ptr<float>(), a.to(at::kBFloat16).to(at::kFloat),
                                         bt.to(at::kBFloat16).to(at::kFloat), scale, h.data(), yr.data_ptr<float>());
      EXPECT_TRUE(at::equal(yb, yr)) << "out " << out << " portable " << portable;
      cadre::batch_invariant_linear_limit(cadre::KernelPath::Best);
    }
    EXPECT_TRUE(at::equal(results[0], results[1])) << "out " << out << " (" << cadre::batch_invariant_linear_isa() << ")";
    // Each of the two products adds at most n u of its terms' magnitudes (u = 2^-24), the second
    // also carrying the first's error; the scaled add one more rounding of y.
    const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
    const at::Tensor h = d(a).matmul(d(x)), exact = d(y0) + scale * d(bt).t().matmul(h);
    const at::Tensor h_abs = d(a).abs().matmul(d(x).abs());
    const double u = std::ldexp(1.0, -24);
    const at::Tensor bound = (d(y0).abs() + scale * d(bt).abs().t().matmul(h_abs)) * double(in + rank + 2) * u;
    EXPECT_TRUE(((d(results[0]) - exact).abs() <= bound).all().item<bool>()) << "out " << out;
  }
}

// Blocks of 256 positions: a slot holds ceil(length / 256) of them, all layers' keys and values
// in each, and gives them back when reset; the peak is remembered.
TEST(LlamaDecodeCache, GrowsInBlocksAsSequencesGrowAndIsFreedAtReset) {
  at::set_num_threads(2);
  cadre::LlamaConfig config = small_config(false, 2);
  config.max_seq_len = 600;
  cadre::Llama model(config);
  model.init_weights(21);
  cadre::LlamaDecoder decoder(model, {3, 0, at::kFloat});
  const int64_t per_token = 2 * 2 * 2 * 16 * 4;  // (key, value) x layers x kv heads x head_dim x float32
  ASSERT_EQ(decoder.cache_bytes_per_token(), per_token);
  ASSERT_EQ(decoder.cache_block_tokens(), 256);
  EXPECT_EQ(decoder.cache_bytes(), 0) << "nothing is allocated before a sequence needs it";
  const at::Tensor tokens = random_tokens(300, 300, 8);
  at::Tensor full;
  {
    c10::NoGradGuard no_grad;
    full = model.forward(tokens.unsqueeze(0)).squeeze(0);
  }
  // Across the boundary at 256 the logits still follow the training forward.
  const at::Tensor stepwise = decode_all(decoder, 0, tokens, 1);
  for (int64_t t = 250; t < 300; ++t) EXPECT_LT(relative_error(stepwise[t], full[t]), 1e-5) << "position " << t;
  EXPECT_EQ(decoder.cache_bytes(), 2 * 256 * per_token) << "300 positions: two blocks";
  EXPECT_TRUE(at::equal(decode_all(decoder, 0, tokens, 300), stepwise)) << "a prompt in one call crosses the boundary too";
  decode_all(decoder, 1, tokens.narrow(0, 0, 10), 10);
  EXPECT_EQ(decoder.cache_bytes(), 3 * 256 * per_token);
  decoder.reset(0);
  EXPECT_EQ(decoder.cache_bytes(), 1 * 256 * per_token) << "a reset slot gives its blocks back";
  EXPECT_EQ(decoder.cache_peak_bytes(), 3 * 256 * per_token);
  decoder.reset(1);
  EXPECT_EQ(decoder.cache_bytes(), 0);
  // A context shorter than a block is one block of the context's length.
  cadre::LlamaDecoder short_context(model, {2, 40, at::kFloat});
  EXPECT_EQ(short_context.cache_block_tokens(), 40);
}

// A bf16 cache (the default with bf16 weights: half the bytes) keeps decoding bit-for-bit
// batch-invariant and chunk-invariant, and stays close to the float32 decoder: bf16 rounds
// the 9 matrices a token passes (4 per layer, the head) and their 9 inputs, the embedding, and
// each layer's cached key and value (4 more), 2^-9 relative each: 23 x 2^-9 = 4.5e-2 of the
// largest logit even all aligned (measured 6.2e-3; 4.6e-3 before the inputs were rounded).
TEST(LlamaDecodeCache, ABf16CacheKeepsEveryBitForBitProperty) {
  at::set_num_threads(2);
  cadre::LlamaConfig config = small_config(false, 2);
  config.max_seq_len = 300;
  cadre::Llama model(config);
  model.init_weights(22);
  cadre::LlamaDecoder bf16(model, {4, 0, at::kBFloat16}), fp32(model, {1, 0, at::kFloat});
  EXPECT_EQ(2 * bf16.cache_bytes_per_token(), fp32.cache_bytes_per_token());
  const at::Tensor tokens = random_tokens(300, 280, 13);
  const at::Tensor alone = decode_all(bf16, 0, tokens, 1);
  EXPECT_TRUE(at::equal(decode_all(bf16, 2, tokens, 280), alone)) << "one call";
  EXPECT_TRUE(at::equal(decode_all(bf16, 3, tokens, 7), alone)) << "chunks of 7";
  // Beside another sequence at other positions, in the same calls.
  bf16.reset(1);
  bf16.reset(2);
  std::vector<at::Tensor> got;
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    std::vector<cadre::DecodeRow> rows = {{2, tokens[tokens.size(0) - 1 - t].item<int64_t>(), true},
                                          {1, tokens[t].item<int64_t>(), true}};
    got.push_back(bf16.forward(rows)[1]);
  }
  EXPECT_TRUE(at::equal(at::stack(got), alone)) << "batched";
  const at::Tensor reference = decode_all(fp32, 0, tokens, 1);
  double worst = 0;
  for (int64_t t = 0; t < tokens.size(0); ++t) worst = std::max(worst, relative_error(alone[t], reference[t]));
  std::printf("bf16 weights and cache against float32: max relative error over %lld positions: %.2e\n",
              static_cast<long long>(tokens.size(0)), worst);
  EXPECT_LT(worst, 4.5e-2);
}

}  // namespace
