// One rank of a Llama pipeline test job (pipeline_test.cpp): the tiny Llama with four blocks
// split into p x chunks virtual stages by parameter count (the embedding counted on the first,
// norm and head on the last), one step of `micro` micro-batches under `schedule`. The rank checks
// the gradients of the parameters its virtual stages hold against one process running the whole
// model on the same micro-batches one after another, bit for bit, and the last stage the loss.
//   llama_stage_worker <schedule> <chunks> <micro>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/llama/model.h"
#include "pipeline/executor.h"
#include "pipeline/stage_split.h"
#include "pipeline/worker_step.h"
#include "support/tiny_llama.h"

namespace {

constexpr int64_t kRows = 2, kSeq = 16;

at::Tensor tokens_of(int64_t micro, int64_t salt, int64_t vocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(salt + micro);
  return at::randint(vocab, {kRows, kSeq}, gen, at::kLong);
}

int64_t numel_of(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// The names of the parameters virtual stage g holds under `bounds`.
bool held_by(const std::string& name, int64_t g, const cadre::pipeline::StageBounds& bounds) {
  const int64_t last = int64_t(bounds.size()) - 2;
  if (name.rfind("tok_embeddings.", 0) == 0) return g == 0;
  if (name.rfind("norm.", 0) == 0 || name.rfind("output.", 0) == 0) return g == last;
  const int64_t block = std::stoll(name.substr(std::string("layers.").size()));
  return bounds[size_t(g)] <= block && block < bounds[size_t(g + 1)];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_stage_worker <schedule> <chunks> <micro>\n");
    return 2;
  }
  try {
    cadre::test::WorkerStart start = cadre::test::start_pipeline_worker(argv);
    cadre::comm::Communicator& world = *start.world;
    cadre::pipeline::StepShape& step = start.step;
    cadre::LlamaConfig config = cadre::test::tiny_llama_config();
    config.n_layers = 4;
    step.activation_sizes = {kRows, kSeq, config.dim};
    const int64_t p = world.size(), stage = world.rank(), m = step.shape.micro_batches;
    const int64_t last = step.shape.virtual_stages() - 1;

    cadre::Llama reference(config), model(config);
    reference.init_weights(1);
    model.init_weights(1);
    double reference_loss = 0;
    for (int64_t micro = 0; micro < m; ++micro) {
      const at::Tensor logits = reference.forward(tokens_of(micro, 300, config.vocab_size));
      at::Tensor loss = reference.loss(logits, tokens_of(micro, 400, config.vocab_size)) / double(m);
      loss.backward();
      reference_loss += loss.item<double>();
    }

    std::vector<int64_t> block_weights;
    for (const auto& block : model.layers->blocks) block_weights.push_back(numel_of(*block));
    const cadre::pipeline::StageBounds bounds = cadre::pipeline::balanced_split(
        block_weights, step.shape.virtual_stages(), numel_of(*model.tok_embeddings),
        numel_of(*model.norm) + numel_of(*model.output));
    cadre::pipeline::Links links(world, step.schedule == cadre::pipeline::Schedule::Interleaved);
    double loss_sum = 0;
    cadre::pipeline::StageWork work;
    work.forward = [&](int64_t chunk, int64_t micro, const at::Tensor& input) {
      const int64_t g = chunk * p + stage;
      at::Tensor h = g == 0 ? model.embed(tokens_of(micro, 300, config.vocab_size)) : input;
      h = model.run_blocks(h, bounds[size_t(g)], bounds[size_t(g + 1)]);
      if (g < last) return h;
      at::Tensor loss = model.loss(model.head(h), tokens_of(micro, 400, config.vocab_size)) / double(m);
      loss_sum += loss.item<double>();
      return loss;
    };
    cadre::pipeline::run_step(work, links, step);

    int mismatches = 0, checked = 0;
    auto want = reference.named_parameters();
    for (const auto& item : model.named_parameters()) {
      bool mine = false;
      for (int64_t chunk = 0; chunk < step.shape.chunks; ++chunk) mine = mine || held_by(item.key(), chunk * p + stage, bounds);
      if (!mine) continue;
      ++checked;
      if (!item.value().grad().defined() || !at::equal(item.value().grad(), want[item.key()].grad())) {
        std::printf("stage %lld: %s's gradient differs from one process's\n", (long long)stage, item.key().c_str());
        ++mismatches;
      }
    }
    if (stage == p - 1 && loss_sum != reference_loss) {
      std::printf("stage %lld: loss %.17g, one process %.17g\n", (long long)stage, loss_sum, reference_loss);
      ++mismatches;
    }
    std::printf("stage %lld: %s, %lld chunk(s), %lld micro-batches, blocks split %s: %d of %d gradients differ\n",
                (long long)stage, argv[1], (long long)step.shape.chunks, (long long)m,
                [&] {
                  std::string s;
                  for (int64_t b : bounds) s += (s.empty() ? "" : ",") + std::to_string(b);
                  return s;
                }()
                    .c_str(),
                mismatches, checked);
    world.barrier();
    return mismatches == 0 && checked > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama_stage_worker: %s\n", e.what());
    return 1;
  }
}
