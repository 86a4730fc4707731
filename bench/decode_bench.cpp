// Decode throughput of Cadre's KV-cache decoder (models/model.h's Decoder; Llama's is
// models/llama/decode.h), the figures
// bench/decode_throughput.py sets beside the Python peer's: for each number of concurrent
// streams B, B prompts are prefilled in one forward, then `--tokens` greedy decoding steps run
// with one new token per stream per step; tokens/s counts the decoding steps only. Prompts are
// token ids (1 + 131 s + 31 t) mod vocab, the same on both sides.
//
//   decode_bench <hf_dir|checkpoint> [--threads 2] [--prompt-len 16] [--tokens 128]
//                [--streams 1,8,32] [--dtype float32|bfloat16] [--repeats 3]
// Prints one JSON object per stream count.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu_block_cache.h"
#include "generate/model_source.h"
#include "models/batch_invariant_linear.h"
#include "models/model.h"

namespace {

int64_t prompt_token(int64_t stream, int64_t t, int64_t vocab) { return (1 + 131 * stream + 31 * t) % vocab; }

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: decode_bench <hf_dir|checkpoint> [--threads N] [--prompt-len N] [--tokens N] "
                         "[--streams 1,8,32] [--dtype float32|bfloat16] [--repeats N]\n");
    return 2;
  }
  std::string model_path = argv[1], streams_text = "1,8,32", dtype = "float32";
  int64_t threads = 2, prompt_len = 16, tokens = 128, repeats = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--threads") threads = std::stoll(value);
    else if (flag == "--prompt-len") prompt_len = std::stoll(value);
    else if (flag == "--tokens") tokens = std::stoll(value);
    else if (flag == "--streams") streams_text = value;
    else if (flag == "--dtype") dtype = value;
    else if (flag == "--repeats") repeats = std::stoll(value);
    else {
      std::fprintf(stderr, "decode_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::vector<int64_t> streams;
  std::stringstream ss(streams_text);
  for (std::string item; std::getline(ss, item, ',');) streams.push_back(std::stoll(item));
  at::set_num_threads(static_cast<int>(threads));
  cadre::cpu_block_cache::install();  // as `cadre serve` and `cadre generate` run
  try {
  cadre::InferenceModel m = cadre::inference_model_open(model_path, "", /*need_tokenizer=*/false);
  const int64_t most = *std::max_element(streams.begin(), streams.end());
  std::unique_ptr<cadre::Decoder> decoder_ptr =
      m.decoder({most, prompt_len + tokens, dtype == "bfloat16" ? at::kBFloat16 : at::kFloat});
  cadre::Decoder& decoder = *decoder_ptr;
  const int64_t V = decoder.vocab_size();
  for (int64_t B : streams) {
    std::vector<double> rates;
    std::vector<int64_t> first_stream;
    for (int64_t rep = 0; rep <= repeats; ++rep) {  // run 0 warms up
      std::vector<cadre::DecodeRow> rows;
      for (int64_t s = 0; s < B; ++s) {
        decoder.reset(s);
        for (int64_t t = 0; t < prompt_len; ++t) rows.push_back({s, prompt_token(s, t, V), t + 1 == prompt_len});
      }
      at::Tensor logits = decoder.forward(rows);
      std::vector<int64_t> next(static_cast<size_t>(B));
      for (int64_t s = 0; s < B; ++s) next[s] = argmax(logits.data_ptr<float>() + s * V, V);
      first_stream = {next[0]};
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t step = 1; step < tokens; ++step) {
        rows.clear();
        for (int64_t s = 0; s < B; ++s) rows.push_back({s, next[s], true});
        logits = decoder.forward(rows);
        for (int64_t s = 0; s < B; ++s) next[s] = argmax(logits.data_ptr<float>() + s * V, V);
        first_stream.push_back(next[0]);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) rates.push_back(double(B * (tokens - 1)) / seconds);
    }
    std::sort(rates.begin(), rates.end());
    nlohmann::json out = {{"impl", "cadre"},        {"dtype", dtype},        {"streams", B},
                          {"threads", threads},     {"tokens_per_s", rates[rates.size() / 2]},
                          {"kernels", cadre::batch_invariant_linear_isa()}, {"stream0_tokens", first_stream}};
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
