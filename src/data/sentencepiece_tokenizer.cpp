// SentencePiece tokenizer over its shim (see spm_shim.cpp for why it is loaded at run time).
#include "data/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path) : path_(model_path) {
  const char* error = nullptr;
  handle_ = spm().load(model_path.c_str(), &error);
  if (!handle_) throw ConfigError(str("cannot load tokenizer '", model_path, "': ", error ? error : "?"));
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (handle_) spm().free(handle_);
}

std::vector<int> SentencePieceTokenizer::encode(const std::string& text) const {
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

std::string SentencePieceTokenizer::decode(const std::vector<int>& ids) const {
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

std::string SentencePieceTokenizer::piece(int id) const {
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

int64_t SentencePieceTokenizer::vocab_size() const { return spm().piece_size(handle_); }
int SentencePieceTokenizer::bos_id() const { return spm().bos_id(handle_); }
std::vector<int> SentencePieceTokenizer::eos_ids() const {
  const int eos = spm().eos_id(handle_);
  return eos >= 0 ? std::vector<int>{eos} : std::vector<int>{};
}

std::string SentencePieceTokenizer::bos_token() const { return bos_id() >= 0 ? piece(bos_id()) : ""; }
std::string SentencePieceTokenizer::eos_token() const { return eos_id() >= 0 ? piece(eos_id()) : ""; }

std::vector<int> SentencePieceTokenizer::encode_prompt(const std::string& text) const {
  std::vector<int> ids;
  if (bos_id() >= 0) ids.push_back(bos_id());
  const std::vector<int> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

// SentencePiece has no notion of special tokens in text: the spans between BOS and EOS
// spellings are encoded one by one, as Meta's reference chat code encodes each turn.
std::vector<int> SentencePieceTokenizer::encode_rendered(const std::string& text) const {
  const std::string bos = bos_token(), eos = eos_token();
  std::vector<int> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t at_bos = bos.empty() ? std::string::npos : text.find(bos, pos);
    const size_t at_eos = eos.empty() ? std::string::npos : text.find(eos, pos);
    const size_t next = std::min(at_bos, at_eos);
    const std::vector<int> run = encode(text.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    ids.insert(ids.end(), run.begin(), run.end());
    if (next == std::string::npos) break;
    ids.push_back(next == at_bos ? bos_id() : eos_id());
    pos = next + (next == at_bos ? bos : eos).size();
  }
  return ids;
}

// SentencePiece's space mark becomes a space, a byte piece <0xNN> its byte.
std::string SentencePieceTokenizer::token_text(int id) const {
  const std::string p = piece(id);
  if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>')
    return std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += p[i];
    }
  }
  return out;
}

}  // namespace cadre
