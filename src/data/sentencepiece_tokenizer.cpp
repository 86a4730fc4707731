// Tokenizer over the SentencePiece shim (see spm_shim.cpp for why it is loaded at run time).
#include "data/tokenizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <filesystem>
#include <mutex>

#include "core/error.h"

namespace cadre {
namespace {

struct SpmApi {
  void* (*load)(const char*, const char**);
  void (*free)(void*);
  long long (*encode)(void*, const char*, size_t, int*, size_t, const char**);
  long long (*decode)(void*, const int*, size_t, char*, size_t, const char**);
  long long (*id_to_piece)(void*, int, char*, size_t);
  int (*piece_size)(void*);
  int (*bos_id)(void*);
  int (*eos_id)(void*);
};

// The shim sits in lib/ beside bin/ of the build or install tree; CADRE_SPM_SHIM overrides.
std::string shim_path() {
  if (const char* env = std::getenv("CADRE_SPM_SHIM")) return env;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto candidate = exe.parent_path().parent_path() / "lib" / "libcadre_spm.so";
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return CADRE_SPM_SHIM_BUILD_PATH;
}

const SpmApi& spm() {
  static SpmApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string path = shim_path();
#ifdef CADRE_SANITIZE
    // The sanitizers' runtimes refuse RTLD_DEEPBIND (google/sanitizers#611).
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
    CADRE_CHECK(lib, "cannot load the SentencePiece shim '", path, "': ", dlerror());
    auto sym = [&](const char* name) {
      void* s = dlsym(lib, name);
      CADRE_CHECK(s, "SentencePiece shim '", path, "' lacks ", name);
      return s;
    };
    api.load = reinterpret_cast<decltype(api.load)>(sym("cadre_spm_load"));
    api.free = reinterpret_cast<decltype(api.free)>(sym("cadre_spm_free"));
    api.encode = reinterpret_cast<decltype(api.encode)>(sym("cadre_spm_encode"));
    api.decode = reinterpret_cast<decltype(api.decode)>(sym("cadre_spm_decode"));
    api.id_to_piece = reinterpret_cast<decltype(api.id_to_piece)>(sym("cadre_spm_id_to_piece"));
    api.piece_size = reinterpret_cast<decltype(api.piece_size)>(sym("cadre_spm_piece_size"));
    api.bos_id = reinterpret_cast<decltype(api.bos_id)>(sym("cadre_spm_bos_id"));
    api.eos_id = reinterpret_cast<decltype(api.eos_id)>(sym("cadre_spm_eos_id"));
  });
  return api;
}

}  // namespace

void tokenizer_train(const std::string& lines_file, const std::string& prefix, int64_t vocab_size, int threads) {
  // Llama-style: BPE, byte fallback so no input is unknown, digits split, ids 0-2 special.
  std::vector<std::string> argv = {
      "spm_train", "--input=" + lines_file, "--model_prefix=" + prefix, str("--vocab_size=", vocab_size),
      "--model_type=bpe", "--byte_fallback=true", "--split_digits=true", "--character_coverage=0.9995",
      "--input_sentence_size=2000000", "--shuffle_input_sentence=true", str("--num_threads=", threads),
      "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1", "--max_sentence_length=8192"};
  std::string log_path = prefix + "_train.log";
  pid_t pid = fork();
  CADRE_CHECK(pid >= 0, "cannot fork to run spm_train: ", std::strerror(errno));
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execvp("spm_train", args.data());
    std::fprintf(stderr, "cannot run spm_train: %s (install the sentencepiece package: scripts/setup.sh)\n",
                 std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::filesystem::remove(log_path);
    return;
  }
  // Show the end of spm_train's log: it says what was wrong with the corpus or options.
  std::ifstream in(log_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string tail;
  for (size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i) tail += "\n  " + lines[i];
  throw ConfigError(str("tokenizer training on '", lines_file, "' failed (spm_train exit status ", status,
                        ", log '", log_path, "'):", tail));
}

Tokenizer::Tokenizer(const std::string& model_path) : path_(model_path) {
  const char* error = nullptr;
  handle_ = spm().load(model_path.c_str(), &error);
  if (!handle_) throw ConfigError(str("cannot load tokenizer '", model_path, "': ", error ? error : "?"));
}

Tokenizer::~Tokenizer() {
  if (handle_) spm().free(handle_);
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids(text.size() / 2 + 16);
  const char* error = nullptr;
  long long n = spm().encode(handle_, text.data(), text.size(), ids.data(), ids.size(), &error);
  CADRE_CHECK(n >= 0, "tokenizer '", path_, "': encode failed: ", error ? error : "?");
  if (static_cast<size_t>(n) > ids.size()) {
    ids.resize(n);
    n = spm().encode(handle_, text.data(), text.size(), ids.data(), ids.size(), &error);
    CADRE_CHECK(n >= 0, "tokenizer '", path_, "': encode failed: ", error ? error : "?");
  }
  ids.resize(n);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text(ids.size() * 8 + 16, '\0');
  const char* error = nullptr;
  long long n = spm().decode(handle_, ids.data(), ids.size(), text.data(), text.size(), &error);
  CADRE_CHECK(n >= 0, "tokenizer '", path_, "': decode failed: ", error ? error : "?");
  if (static_cast<size_t>(n) > text.size()) {
    text.resize(n);
    n = spm().decode(handle_, ids.data(), ids.size(), text.data(), text.size(), &error);
  }
  text.resize(n);
  return text;
}

std::string Tokenizer::piece(int id) const {
  std::string out(64, '\0');
  long long n = spm().id_to_piece(handle_, id, out.data(), out.size());
  CADRE_CHECK(n >= 0, "tokenizer '", path_, "': no token ", id, " (vocabulary of ", vocab_size(), ")");
  if (static_cast<size_t>(n) > out.size()) {
    out.resize(static_cast<size_t>(n));
    n = spm().id_to_piece(handle_, id, out.data(), out.size());
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

int64_t Tokenizer::vocab_size() const { return spm().piece_size(handle_); }
int Tokenizer::bos_id() const { return spm().bos_id(handle_); }
int Tokenizer::eos_id() const { return spm().eos_id(handle_); }

}  // namespace cadre
