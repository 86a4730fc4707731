// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}): vocabulary,
// ranked merges, byte fallback and unknown-token handling, merging each pre-token exactly as
// the tokenizers library does (candidate merges taken by rank, then position).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/flat_u64_map.h"

namespace cadre::detail {

struct BpeOptions {
  bool byte_fallback = false;  // characters outside the vocabulary become <0xXX> byte tokens
  bool ignore_merges = false;  // a pre-token that is itself in the vocabulary is one token
  bool fuse_unk = false;       // consecutive unknown characters become one unknown token
  std::string unk_token;       // empty: unknown characters are dropped
};

class BpeModel {
 public:
  // `merges` are pairs of token strings, highest priority first. Throws cadre::ConfigError
  // naming `where` (the file) and the field when a merge's part or result is not in the vocabulary.
  BpeModel(std::unordered_map<std::string, int> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& where);

  // Appends the ids of one pre-token (already byte-level mapped where the pipeline does so).
  void tokenize(const std::string& word, std::vector<int>& out) const;

  int token_to_id(const std::string& token) const;  // -1 when absent
  const std::string* id_to_token(int id) const;     // nullptr when absent
  int max_id() const { return static_cast<int>(by_id_.size()) - 1; }
  size_t size() const { return vocab_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int new_id;
  };
  static uint64_t pair_key(int a, int b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  void build_char_tables();
  static uint64_t char_key(const char* p, size_t len);
  int char_id(const char* p, size_t len) const;
  bool all_bytes_known(const char* ch, size_t len) const;
  void initial_symbols(const std::string& word, std::vector<int>& ids) const;
  void merge_all(std::vector<int>& ids) const;
  const Merge* find_merge(int a, int b) const { return merges_.find(pair_key(a, b)); }

  std::unordered_map<std::string, int> vocab_;
  std::vector<const std::string*> by_id_;  // into vocab_'s keys; nullptr for unused ids
  FlatU64Map<Merge> merges_;
  // The merged id of each rank, so that a queued candidate needs only its rank and position
  // (a rank names one merge; -1 for a rank a later repeat of its pair replaced).
  std::vector<int> rank_new_id_;
  int rank_bytes_ = 0;  // bytes a rank needs, for sorting candidates by rank
  // Ids of the token strings one character can be (-1 when absent), so the first pass over a
  // word builds no strings: one-byte tokens by byte, two- to four-byte ones by packed bytes,
  // and the <0xXX> byte-fallback tokens by byte.
  std::array<int, 256> one_byte_id_{};
  FlatU64Map<int> multi_byte_id_;
  std::array<int, 256> fallback_id_{};
  BpeOptions options_;
  int unk_id_ = -1;
  std::string where_;

  // Words repeat in text far more than they vary: remember each one's ids (as tokenizers does).
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

}  // namespace cadre::detail
