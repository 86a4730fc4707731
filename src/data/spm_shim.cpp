// C interface to SentencePiece encoding, built as its own shared library and loaded with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Debian's libsentencepiece embeds and exports its own
// protobuf-lite, which clashes with the libprotobuf that libtorch loads (a segfault during
// static initialisation when both are linked into one process); isolating it fixes that.
// Nothing here may write to std::cerr/std::cout: under DEEPBIND the library would bind to
// libstdc++'s own stream objects, not the executable's initialised copies, and crash. That is
// why tokenizer training (which logs) runs as the spm_train program instead.
#include <sentencepiece_processor.h>

#include <cstring>
#include <string>
#include <vector>

namespace {
thread_local std::string g_error;

const char* fail(const sentencepiece::util::Status& status) {
  g_error = status.ToString();
  return g_error.c_str();
}
}  // namespace

extern "C" {

// Returns a processor handle, or nullptr with *error set (valid until the next call).
void* cadre_spm_load(const char* path, const char** error) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  auto status = sp->Load(path);
  if (!status.ok()) {
    delete sp;
    *error = fail(status);
    return nullptr;
  }
  return sp;
}

void cadre_spm_free(void* handle) { delete static_cast<sentencepiece::SentencePieceProcessor*>(handle); }

// Encodes text; writes up to `cap` ids and returns how many there are (call again with a
// larger buffer if that exceeds cap), or -1 with *error set.
long long cadre_spm_encode(void* handle, const char* text, size_t len, int* out, size_t cap, const char** error) {
  std::vector<int> ids;
  auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(std::string(text, len), &ids);
  if (!status.ok()) {
    *error = fail(status);
    return -1;
  }
  std::memcpy(out, ids.data(), std::min(cap, ids.size()) * sizeof(int));
  return static_cast<long long>(ids.size());
}

long long cadre_spm_decode(void* handle, const int* ids, size_t n, char* out, size_t cap, const char** error) {
  std::string text;
  auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(std::vector<int>(ids, ids + n), &text);
  if (!status.ok()) {
    *error = fail(status);
    return -1;
  }
  std::memcpy(out, text.data(), std::min(cap, text.size()));
  return static_cast<long long>(text.size());
}

// The piece of an id as the vocabulary spells it ("\xe2\x96\x81the", "<0x0A>"); its length, or -1 for
// an id outside the vocabulary.
long long cadre_spm_id_to_piece(void* handle, int id, char* out, size_t cap) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  if (id < 0 || id >= sp->GetPieceSize()) return -1;
  const std::string& piece = sp->IdToPiece(id);
  std::memcpy(out, piece.data(), std::min(cap, piece.size()));
  return static_cast<long long>(piece.size());
}

int cadre_spm_piece_size(void* h) { return static_cast<sentencepiece::SentencePieceProcessor*>(h)->GetPieceSize(); }
int cadre_spm_bos_id(void* h) { return static_cast<sentencepiece::SentencePieceProcessor*>(h)->bos_id(); }
int cadre_spm_eos_id(void* h) { return static_cast<sentencepiece::SentencePieceProcessor*>(h)->eos_id(); }

}  // extern "C"
