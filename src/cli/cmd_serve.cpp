// `cadre serve --model CKPT|HF_DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY] ...`: the
// OpenAI-compatible server. SIGTERM or SIGINT drains: new requests get 503, queued and running
// ones complete, then the process exits 0 (a second signal stops at once).
#include <ATen/Parallel.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <utility>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/cpu_block_cache.h"
#include "core/device.h"
#include "core/error.h"
#include "core/sysinfo.h"
#include "core/log.h"
#include "data/tokenizer.h"
#include "generate/model_source.h"
#include "models/batch_invariant_linear.h"
#include "models/model.h"
#include "models/registry.h"
#include "serve/http_server.h"
#include "serve/kv_cache_budget.h"
#include "serve/lora_adapters.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace cadre {

int cmd_serve(const Args& args) {
  std::string model, tokenizer_path, chat_template, dtype, model_name, trusted_proxies;
  std::string device_name = "cpu", kv_cache_memory;
  HttpOptions http;
  std::vector<std::string> lora;
  int64_t port = 8000, max_batch = 32, max_queue = 64, context = 0, threads = 2, step_tokens = 256, batch_wait_ms = 0;
  int64_t max_body_kib = 1024, max_header_kib = 32, max_connections = 256, max_per_client = 64;
  double drain_timeout = 60;
  Flags flags("cadre serve --model <checkpoint|run_dir|hf_dir> [--host 127.0.0.1] [--port 8000] [--api-key KEY] [options]");
  flags.add("--model", &model, "a checkpoint, a run or checkpoint directory, or a Hugging Face folder");
  flags.add("--host", &http.host, "address to listen on (default 127.0.0.1: this machine only)");
  flags.add("--port", &port, "port (default 8000; 0 picks a free one and prints it)");
  flags.add("--api-key", &http.api_key, "require `Authorization: Bearer KEY` on /v1/* (default: $CADRE_API_KEY, else none)");
  flags.add("--model-name", &model_name, "the model id clients send (default: the model directory's name)");
  flags.add("--lora", &lora,
            "name=path: a PEFT LoRA adapter folder served beside the base as model id `name` (repeat for several; "
            "requests for different adapters and the base share decoding steps)");
  flags.add("--tokenizer", &tokenizer_path, "a tokenizer.model, tokenizer.json or its folder (default: the model's own)");
  flags.add("--chat-template", &chat_template,
            "a Jinja template file, llama2 or chatml (default: the model's own, chat_template.jinja or "
            "tokenizer_config.json's; else llama2)");
  flags.add("--max-batch", &max_batch, "sequences decoded together (default 32)");
  flags.add("--batch-wait-ms", &batch_wait_ms,
            "an idle server waits up to this long for --max-batch requests before its first step (default 0)");
  flags.add("--max-queue", &max_queue, "requests waiting for a slot before 429 (default 64)");
  flags.add("--context", &context, "tokens per sequence, prompt included (default: the model's max_seq_len)");
  flags.add("--step-tokens", &step_tokens, "prompt tokens taken in per decoding step (default 256)");
  flags.add("--kv-cache-memory", &kv_cache_memory,
            "most memory the KV cache may take, allocated as sequences grow: bytes (8GiB, 500MB) or a fraction of the "
            "available memory (0.5); default --max-batch x --context, capped at half of what is available. A request "
            "that can never fit gets 400, one that fits later waits");
  flags.add("--max-body-kib", &max_body_kib, "largest request body in KiB (default 1024; larger: 413)");
  flags.add("--max-header-kib", &max_header_kib,
            "largest request line and header fields together in KiB (default 32; larger: 431)");
  flags.add("--max-connections", &max_connections,
            "open connections; more are answered 503 with Retry-After at once (default 256)");
  flags.add("--max-connections-per-client", &max_per_client,
            "open connections from one client address; more are answered 429 with Retry-After at once "
            "(default 64; 0: no such cap). Behind --trusted-proxies: requests in flight per client");
  flags.add("--trusted-proxies", &trusted_proxies,
            "addresses or CIDR ranges of load balancers (10.0.0.0/8,::1): their connections are not capped per "
            "address, and each request counts under the client its X-Forwarded-For names");
  flags.add("--proxy-protocol", &http.proxy_protocol,
            "connections from --trusted-proxies begin with a PROXY protocol header (v1 or v2, as an AWS NLB or "
            "HAProxy sends), whose source address is the client the cap counts; one without it gets 400");
  flags.add("--header-timeout", &http.header_timeout_s,
            "seconds a request's head may take to arrive, from the connect or, on a kept-alive connection, its first byte (default 30; then 408)");
  flags.add("--body-timeout", &http.body_timeout_s, "seconds a request's body may take to arrive (default 60; then 408)");
  flags.add("--idle-timeout", &http.idle_timeout_s,
            "seconds a kept-alive connection may wait for its next request (default 30)");
  flags.add("--send-timeout", &http.send_timeout_s,
            "seconds one write of an answer may wait for a client that does not read; then its request is "
            "cancelled (default 30)");
  flags.add("--threads", &threads, "compute threads (default 2)");
  flags.add("--dtype", &dtype, "weights: float32 or bfloat16; default the dtype they are stored in (bfloat16 files: bfloat16)");
  flags.add("--device", &device_name, "cpu (default), cuda (the GPU LOCAL_RANK picks) or auto (cuda when usable)");
  flags.add("--drain-timeout", &drain_timeout, "seconds SIGTERM waits for requests in flight (default 60)");
  auto rest = flags.parse(args);
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(!model.empty(), "--model is required\n", flags.usage());
  CADRE_CONFIG_CHECK(port >= 0 && port <= 65535, "--port must be in 0..65535");
  CADRE_CONFIG_CHECK(max_batch >= 1 && max_batch <= 1024, "--max-batch must be in 1..1024");
  CADRE_CONFIG_CHECK(batch_wait_ms >= 0 && batch_wait_ms <= 600000, "--batch-wait-ms must be in 0..600000");
  // Every request waits in the queue for the decoding loop to take it, even when a slot is free.
  CADRE_CONFIG_CHECK(max_queue >= 1, "--max-queue must be >= 1 (every request passes through the queue; 0 would "
                                     "refuse them all)");
  CADRE_CONFIG_CHECK(step_tokens >= 1, "--step-tokens must be >= 1");
  CADRE_CONFIG_CHECK(max_body_kib >= 1, "--max-body-kib must be >= 1");
  CADRE_CONFIG_CHECK(max_body_kib <= 1024 * 1024, "--max-body-kib must be <= 1048576 (1 GiB)");
  CADRE_CONFIG_CHECK(max_header_kib >= 1 && max_header_kib <= 1024, "--max-header-kib must be in 1..1024");
  CADRE_CONFIG_CHECK(max_connections >= 1 && max_connections <= 65536, "--max-connections must be in 1..65536");
  CADRE_CONFIG_CHECK(max_per_client >= 0 && max_per_client <= 65536,
                     "--max-connections-per-client must be in 0..65536 (0: no cap per client)");
  http.trusted_proxies = http::TrustedProxies::parse(trusted_proxies, "--trusted-proxies");
  CADRE_CONFIG_CHECK(!http.proxy_protocol || !http.trusted_proxies.empty(),
                     "--proxy-protocol needs --trusted-proxies: a PROXY header is read only from the load balancers "
                     "named there (anyone else could write one)");
  for (const auto& [flag, seconds] : {std::pair<const char*, double>{"--header-timeout", http.header_timeout_s},
                                      {"--body-timeout", http.body_timeout_s},
                                      {"--idle-timeout", http.idle_timeout_s},
                                      {"--send-timeout", http.send_timeout_s}})
    CADRE_CONFIG_CHECK(seconds > 0 && seconds <= 86400, flag, " must be in (0, 86400] seconds, got ", seconds);
  CADRE_CONFIG_CHECK(threads >= 1, "--threads must be >= 1");
  CADRE_CONFIG_CHECK(drain_timeout > 0, "--drain-timeout must be > 0");
  CADRE_CONFIG_CHECK(dtype.empty() || dtype == "float32" || dtype == "bfloat16", "--dtype must be float32 or bfloat16, got '",
                     dtype, "'");
  if (!kv_cache_memory.empty()) kv_cache_memory_bytes(kv_cache_memory, machine_available_bytes());  // checked before loading
  if (http.api_key.empty())
    if (const char* key = std::getenv("CADRE_API_KEY")) http.api_key = key;

  // Signals are taken by sigwait below, never by a handler: block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that vanished must not kill the server

  const c10::Device device = device_select(device_name, "--device");
  cpu_block_cache::install();  // decode steps reuse their large blocks
  at::set_num_threads(static_cast<int>(threads));
  InferenceModel m = inference_model_open(model, tokenizer_path);
  if (dtype.empty()) dtype = m.stored_dtype;
  const std::unique_ptr<Tokenizer> owned_tokenizer = tokenizer_load(m.tokenizer);
  const Tokenizer& tokenizer = *owned_tokenizer;
  CADRE_CONFIG_CHECK(tokenizer.vocab_size() <= m.lm().vocab_size(), "tokenizer '", m.tokenizer, "' has ",
                     tokenizer.vocab_size(), " tokens, more than the model's vocabulary of ", m.lm().vocab_size());
  CADRE_CONFIG_CHECK(context >= 0 && context <= m.lm().max_seq_len(), "--context must be in 1..", m.lm().max_seq_len(),
                     " (the model's max_seq_len)");
  const ChatTemplate chat = ChatTemplate::load(chat_template, tokenizer);
  std::unique_ptr<Decoder> decoder =
      m.decoder({max_batch, context, dtype == "bfloat16" ? at::kBFloat16 : at::kFloat, device});
  m.model.reset();  // the decoder holds its own (packed) copy of the weights
  const KvCacheBudget kv_budget = kv_cache_budget(kv_cache_memory, *decoder, machine_available_bytes());
  ServeMetrics metrics;
  metrics.set_kv_cache_budget(kv_budget.bytes);
  Scheduler scheduler(*decoder, tokenizer, {max_batch, max_queue, step_tokens, threads, batch_wait_ms, kv_budget.tokens},
                      metrics);
  http.port = static_cast<int>(port);
  http.max_body_bytes = max_body_kib * 1024;
  http.max_header_bytes = max_header_kib * 1024;
  http.max_connections = static_cast<int>(max_connections);
  http.max_connections_per_client = static_cast<int>(max_per_client);
  http.model_name = model_name.empty() ? m.name : model_name;
  if (!lora.empty())
    http.adapters = serve_load_adapters(lora, http.model_name, *model_state_dict_adapter(m.config), *decoder);
  http.vocab_size = decoder->vocab_size();
  HttpServer server(http, scheduler, tokenizer, chat, metrics);
  server.bind();
  log::info(str("serve: ", m.source, " as '", http.model_name, "' on http://", http.host, ":", server.bound_port(),
                " (max batch ", max_batch, ", queue ", max_queue, ", context ", decoder->max_len(), ", ", dtype,
                " weights on ", device_describe(device), " ", decoder->weight_bytes() / 1e6, " MB, KV cache ",
                kv_cache_description(kv_budget, *decoder), ", resident ", process_rss_bytes() / 1e6, " MB, ",
                batch_invariant_linear_isa(), " kernels, ", threads, " threads", http.api_key.empty() ? "" : ", API key required",
                ")"));
  std::printf("listening on http://%s:%d\n", http.host.c_str(), server.bound_port());
  std::fflush(stdout);
  std::thread listener([&] { server.run(); });

  int received = 0;
  sigwait(&stop_signals, &received);
  log::info(str("serve: signal ", received, ": draining (new requests get 503)"));
  scheduler.drain();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(drain_timeout));
  std::atomic<bool> idle{false};
  std::thread watch([&] {
    scheduler.wait_idle();
    idle = true;
  });
  // Wait for the drain, a second signal or the deadline, whichever comes first. The last two
  // end the process at once: the requests still running are abandoned.
  const timespec tick{0, 100 * 1000 * 1000};
  while (!idle) {
    if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
      log::warn("serve: second signal: stopping without waiting for the requests in flight");
      std::fflush(nullptr);
      std::_Exit(1);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      log::warn(str("serve: requests still running after --drain-timeout ", drain_timeout, " s: stopping"));
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }
  watch.join();
  // Every token is decoded; the streams may still be writing their tails. Stopping the server
  // before they close would cut them.
  if (!server.wait_streams_done(deadline)) {
    log::warn(str("serve: streams still being written after --drain-timeout ", drain_timeout, " s: stopping"));
    std::fflush(nullptr);
    std::_Exit(1);
  }
  server.stop();  // returns once the whole responses in progress were written
  listener.join();
  log::info("serve: drained; bye");
  return 0;
}

}  // namespace cadre
