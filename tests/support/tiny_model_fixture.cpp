// ctest fixture `tiny_model` (tests that need a trained model and its data: import, serving):
// prepares generated text with a 512-token SentencePiece vocabulary into <dir>/data and trains
// the tiny Llama on it for 40 steps (configs/tiny.yaml with a context of 1024, so long
// generations fit) into <dir>/run. Tests find <dir> in CADRE_TINY_MODEL; they copy what they
// change. A run newer than the cadre binary is reused.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/file_util.h"
#include "support/process.h"
#include "support/tiny_dataset.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tiny_model_fixture <dir>\n";
    return 2;
  }
  const fs::path dir = argv[1];
  const fs::path done = dir / ".complete";
  if (fs::exists(done) && fs::last_write_time(done) > fs::last_write_time(CADRE_BIN)) {
    std::cout << "tiny_model fixture: reusing " << (dir / "run").string() << "\n";
    return 0;
  }
  cadre::remove_tree(dir);
  fs::create_directories(dir);
  cadre::test::prepare_tiny_dataset(dir.string(), 4, 20000);
  auto r = cadre::test::run_process({CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml", "--set",
                                     "data.dir=" + (dir / "data").string(), "--set", "run.dir=" + (dir / "run").string(),
                                     "--set", "train.steps=40", "--set", "train.eval_interval=0", "--set",
                                     "model.max_seq_len=1024"});
  std::cout << r.output;
  if (r.exit_code != 0) return 1;
  std::ofstream(done) << "ok\n";
  return 0;
}
