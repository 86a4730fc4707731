// A prepared dataset of generated text for tests that train: vocabulary 512, samples of
// 64 + 1 tokens (what configs/tiny.yaml expects). Header-only: only tests that link
// cadre_data include it.
#pragma once

#include <string>

#include "data/prepare.h"
#include "support/corpus.h"

namespace cadre::test {

// Writes `files` generated documents under <root>/text and prepares them into <root>/data,
// which it returns.
inline std::string prepare_tiny_dataset(const std::string& root, int files, size_t bytes_per_file) {
  write_corpus(root + "/text", files, bytes_per_file);
  PrepareOptions opt;
  opt.inputs = {root + "/text"};
  opt.out = root + "/data";
  opt.vocab_size = 512;
  opt.seq_len = 64;
  dataset_prepare(opt);
  return opt.out;
}

}  // namespace cadre::test
