// `cadre generate --model CKPT|HF_DIR --prompt TEXT [...]`: KV-cache decoding of one
// sequence, streaming its text to stdout as it is generated.
#include <ATen/Parallel.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/cpu_block_cache.h"
#include "core/device.h"
#include "core/error.h"
#include "core/sysinfo.h"
#include "data/tokenizer.h"
#include "generate/generator.h"
#include "generate/model_source.h"
#include "generate/sequence.h"
#include "models/batch_invariant_linear.h"
#include "models/model.h"

namespace cadre {
namespace {

// --chat: the user's message, after an optional system message, through the chat template.
std::vector<int> chat_prompt(const std::string& user, const std::string& system, const std::string& spec,
                             const Tokenizer& tokenizer) {
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", user});
  try {
    return ChatTemplate::load(spec, tokenizer).render(messages, tokenizer);
  } catch (const ChatRefused& e) {
    throw ConfigError(str("--chat: ", e.what()));  // the template refused the conversation
  }
}

}  // namespace

int cmd_generate(const Args& args) {
  std::string model, prompt, tokenizer_path, dtype, device_name = "cpu", system, chat_template;
  int64_t max_tokens = 128, top_k = 0, threads = 2, seed = -1;
  double temperature = 1.0, top_p = 1.0, repetition_penalty = 1.0;
  bool greedy = false, ignore_eos = false, json_out = false, quiet = false, chat = false;
  std::vector<std::string> stop;
  Flags flags("cadre generate --model <checkpoint|run_dir|hf_dir> --prompt <text> [options]");
  flags.add("--model", &model, "a checkpoint, a run or checkpoint directory, or a Hugging Face folder");
  flags.add("--prompt", &prompt, "the text to continue (with what the tokenizer adds: BOS for Llama)");
  flags.add("--chat", &chat, "--prompt is a user message: the model answers it through its chat template");
  flags.add("--system", &system, "with --chat: a system message before the user's");
  flags.add("--chat-template", &chat_template,
            "with --chat: a Jinja template file, llama2 or chatml (default: the model's own, else llama2)");
  flags.add("--max-tokens", &max_tokens, "most tokens to generate (default 128)");
  flags.add("--temperature", &temperature, "sampling temperature; 0 is greedy (default 1.0)");
  flags.add("--greedy", &greedy, "argmax decoding (same as --temperature 0)");
  flags.add("--top-k", &top_k, "sample among the k most likely tokens (0: all)");
  flags.add("--top-p", &top_p, "nucleus sampling: smallest set with this probability mass (default 1.0)");
  flags.add("--seed", &seed, "sampling seed (default: random, printed)");
  flags.add("--repetition-penalty", &repetition_penalty, "> 1 discourages repeating prompt or output tokens");
  flags.add("--stop", &stop, "stop sequences: the text ends before the first one that appears (repeatable)");
  flags.add("--ignore-eos", &ignore_eos, "keep going past the end-of-sequence token");
  flags.add("--tokenizer", &tokenizer_path, "a tokenizer.model, tokenizer.json or its folder (default: the model's own)");
  flags.add("--threads", &threads, "compute threads (default 2)");
  flags.add("--dtype", &dtype, "weights: float32 or bfloat16 (half the memory traffic); default the dtype they are stored in");
  flags.add("--device", &device_name, "cpu (default), cuda (the GPU LOCAL_RANK picks) or auto (cuda when usable)");
  flags.add("--json", &json_out, "print one JSON object (tokens, text, timings) instead of streaming text");
  flags.add("--quiet", &quiet, "no statistics line on stderr");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(!model.empty(), "--model is required\n", flags.usage());
  CADRE_CONFIG_CHECK(flags.given("--prompt"), "--prompt is required\n", flags.usage());
  CADRE_CONFIG_CHECK(max_tokens >= 1, "--max-tokens must be >= 1");
  CADRE_CONFIG_CHECK(temperature >= 0, "--temperature must be >= 0");
  CADRE_CONFIG_CHECK(top_k >= 0, "--top-k must be >= 0");
  CADRE_CONFIG_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1]");
  CADRE_CONFIG_CHECK(repetition_penalty > 0, "--repetition-penalty must be > 0");
  CADRE_CONFIG_CHECK(threads >= 1, "--threads must be >= 1");
  CADRE_CONFIG_CHECK(chat || (system.empty() && chat_template.empty()), "--system and --chat-template need --chat");
  CADRE_CONFIG_CHECK(dtype.empty() || dtype == "float32" || dtype == "bfloat16", "--dtype must be float32 or bfloat16, got '",
                     dtype, "'");

  const c10::Device device = device_select(device_name, "--device");
  cpu_block_cache::install();  // decode steps reuse their large blocks
  at::set_num_threads(static_cast<int>(threads));
  const int64_t rss_before = process_rss_bytes();
  InferenceModel m = inference_model_open(model, tokenizer_path);
  if (dtype.empty()) dtype = m.stored_dtype;
  const std::unique_ptr<Tokenizer> owned_tokenizer = tokenizer_load(m.tokenizer);
  const Tokenizer& tokenizer = *owned_tokenizer;
  CADRE_CONFIG_CHECK(tokenizer.vocab_size() <= m.lm().vocab_size(), "tokenizer '", m.tokenizer, "' has ",
                     tokenizer.vocab_size(), " tokens, more than the model's vocabulary of ", m.lm().vocab_size());
  std::unique_ptr<Decoder> decoder_ptr = m.decoder({1, 0, dtype == "bfloat16" ? at::kBFloat16 : at::kFloat, device});
  Decoder& decoder = *decoder_ptr;
  const int64_t load_peak = process_peak_rss_bytes();  // loading is done: the weights are the decoder's

  const std::vector<int> ids = chat ? chat_prompt(prompt, system, chat_template, tokenizer) : tokenizer.encode_prompt(prompt);
  CADRE_CONFIG_CHECK(static_cast<int64_t>(ids.size()) < decoder.max_len(), "the prompt is ", ids.size(),
                     " tokens; the model's context is ", decoder.max_len());
  GenerationParams params;
  params.sampling.temperature = greedy ? 0.0 : temperature;
  params.sampling.top_k = top_k;
  params.sampling.top_p = top_p;
  params.sampling.repetition_penalty = repetition_penalty;
  params.sampling.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
  params.max_tokens = max_tokens;
  params.stop = stop;
  params.ignore_eos = ignore_eos;
  Sequence sequence(tokenizer, ids, params, decoder.max_len(), sequence_seed(params.sampling.seed, 0));
  if (!json_out && !chat) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  Finish finish = Finish::None;
  GenerationStats stats = generate_sequence(decoder, 0, sequence, [&](const StepResult& step) {
    finish = step.finish;
    if (json_out || step.text.empty()) return;
    std::fwrite(step.text.data(), 1, step.text.size(), stdout);
    std::fflush(stdout);
  });
  const double rate = stats.decode_s > 0 ? (stats.generated_tokens - 1) / stats.decode_s : 0;
  if (json_out) {
    nlohmann::json j = {{"prompt_tokens", ids},
                        {"tokens", sequence.generated()},
                        {"text", sequence.text()},
                        {"finish_reason", finish_reason(finish)},
                        {"seed", params.sampling.seed},
                        {"prefill_s", stats.prefill_s},
                        {"decode_s", stats.decode_s},
                        {"decode_tokens_per_s", rate},
                        {"device", device_describe(device)},
                        {"dtype", dtype},
                        {"weight_bytes", decoder.weight_bytes()},
                        {"rss_before_load_bytes", rss_before},
                        {"peak_rss_after_load_bytes", load_peak}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);  // the statistics line on stderr comes after the text, also when both go to one file
  if (!quiet)
    std::fprintf(stderr,
                 "generate: %s; %lld prompt tokens in %.3f s, %lld tokens generated (%s), %.1f tokens/s decoding "
                 "(%s weights on %s, %.1f MB, peak RSS %.1f MB after loading, %s kernels, %lld threads, seed %llu)\n",
                 m.source.c_str(), static_cast<long long>(stats.prompt_tokens), stats.prefill_s,
                 static_cast<long long>(stats.generated_tokens), finish_reason(finish), rate, dtype.c_str(),
                 device_describe(device).c_str(), decoder.weight_bytes() / 1e6, load_peak / 1e6,
                 device.is_cpu() ? batch_invariant_linear_isa() : "tensor-op",
                 static_cast<long long>(threads),
                 static_cast<unsigned long long>(params.sampling.seed));
  return 0;
}

}  // namespace cadre
