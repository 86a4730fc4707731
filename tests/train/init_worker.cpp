// A rank that sets a run up without training it (train.steps 0: the model made in shards) and
// writes what its shard holds, piece by piece, so a test can put the whole model together from
// any layout's ranks and compare it bit for bit:
//   init_worker <config.yaml> <out-prefix> [key=value ...]
// Writes <out-prefix>.rank<R>: per piece, the parameter's name, its global shape, the offsets
// and shape of this rank's tensor-parallel part, the piece's first element in that part
// (flattened) and its float32 values. Frozen parameters' pieces (train.freeze) are written too.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "models/registry.h"
#include "train/init_from.h"
#include "train/run_setup.h"

namespace {

void put_i64(std::ofstream& out, int64_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); }
void put_shape(std::ofstream& out, const std::vector<int64_t>& s) {
  put_i64(out, static_cast<int64_t>(s.size()));
  for (int64_t d : s) put_i64(out, d);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: init_worker <config.yaml> <out-prefix> [key=value ...]\n");
    return 2;
  }
  std::vector<std::string> overrides(argv + 3, argv + argc);
  overrides.push_back("train.steps=0");
  cadre::Config config = cadre::config_load(argv[1], overrides);
  cadre::init_from_config(config);
  cadre::model_config_resolve(config);
  std::unique_ptr<cadre::RunSetup> run = cadre::run_set_up(config);
  std::ofstream out(std::string(argv[2]) + ".rank" + std::to_string(run->rank), std::ios::binary);
  // Trainable pieces, then frozen ones (train.freeze).
  std::vector<cadre::ShardPiece> pieces = run->sharded.piece_layout();
  std::vector<at::Tensor> values = run->sharded.parameters();
  pieces.insert(pieces.end(), run->sharded.frozen_piece_layout().begin(), run->sharded.frozen_piece_layout().end());
  values.insert(values.end(), run->sharded.frozen_parameters().begin(), run->sharded.frozen_parameters().end());
  const cadre::TensorParallelLayout* tp = run->sharded.tensor_parallel();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const cadre::ShardPiece& p = pieces[i];
    const cadre::Placement* where = tp ? tp->find(p.name) : nullptr;
    put_i64(out, static_cast<int64_t>(p.name.size()));
    out.write(p.name.data(), static_cast<std::streamsize>(p.name.size()));
    put_shape(out, where ? where->global_shape : p.shape);
    put_shape(out, where && !where->replicated ? where->offsets : std::vector<int64_t>(p.shape.size(), 0));
    put_shape(out, p.shape);
    put_i64(out, p.start);
    const at::Tensor v = values[i].contiguous();
    put_i64(out, v.numel());
    out.write(static_cast<const char*>(v.data_ptr()), static_cast<std::streamsize>(v.numel() * 4));
  }
  if (run->group) run->group->barrier();
  return out ? 0 : 1;
}
