// One rank of a pipeline test job (pipeline_test.cpp): a trunk of tanh(Linear) blocks, two per
// virtual stage, trained for one step of `micro` micro-batches under `schedule` with `chunks`
// chunks per stage. The rank checks its blocks' gradients against one process running the same
// micro-batches one after another through the whole trunk, bit for bit, and prints the step's
// loss (the last stage) and timing split.
//   pipeline_worker <schedule> <chunks> <micro>   (PIPELINE_ROWS: the rows this rank expects)
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pipeline/executor.h"
#include "pipeline/worker_step.h"

namespace {

constexpr int64_t kWidth = 16, kBlocksPerChunk = 2, kRows = 3, kSeq = 5;

struct Trunk {
  std::vector<torch::nn::Linear> blocks;
  explicit Trunk(int64_t n) {
    at::manual_seed(1);
    for (int64_t i = 0; i < n; ++i) blocks.emplace_back(kWidth, kWidth);
  }
  at::Tensor run(at::Tensor h, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) h = at::tanh(blocks[size_t(i)]->forward(h));
    return h;
  }
};

at::Tensor micro_input(int64_t micro) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + micro);
  return at::randn({kRows, kSeq, kWidth}, gen);
}

at::Tensor micro_loss(const at::Tensor& out, int64_t micro, int64_t micro_batches) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(200 + micro);
  return (out - at::randn({kRows, kSeq, kWidth}, gen)).pow(2).mean() / double(micro_batches);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: pipeline_worker <schedule> <chunks> <micro>\n");
    return 2;
  }
  try {
    cadre::test::WorkerStart start = cadre::test::start_pipeline_worker(argv);
    cadre::comm::Communicator& world = *start.world;
    cadre::pipeline::StepShape& step = start.step;
    const char* rows = std::getenv("PIPELINE_ROWS");
    step.activation_sizes = {rows ? std::atoll(rows) : kRows, kSeq, kWidth};
    const int64_t p = world.size(), stage = world.rank(), blocks = step.shape.virtual_stages() * kBlocksPerChunk;
    const int64_t m = step.shape.micro_batches, last = step.shape.virtual_stages() - 1;

    Trunk reference(blocks);
    double reference_loss = 0;
    for (int64_t micro = 0; micro < m; ++micro) {
      at::Tensor loss = micro_loss(reference.run(micro_input(micro), 0, blocks), micro, m);
      loss.backward();
      reference_loss += loss.item<double>();
    }

    Trunk trunk(blocks);
    cadre::pipeline::Links links(world, step.schedule == cadre::pipeline::Schedule::Interleaved);
    double loss_sum = 0;
    cadre::pipeline::StageWork work;
    work.forward = [&](int64_t chunk, int64_t micro, const at::Tensor& input) {
      const int64_t g = chunk * p + stage;
      at::Tensor h = trunk.run(g == 0 ? micro_input(micro) : input, g * kBlocksPerChunk, (g + 1) * kBlocksPerChunk);
      if (g < last) return h;
      at::Tensor loss = micro_loss(h, micro, m);
      loss_sum += loss.item<double>();
      return loss;
    };
    const cadre::pipeline::StepFigures figures = cadre::pipeline::run_step(work, links, step);

    int mismatches = 0;
    for (int64_t chunk = 0; chunk < step.shape.chunks; ++chunk)
      for (int64_t b = 0; b < kBlocksPerChunk; ++b) {
        const int64_t i = (chunk * p + stage) * kBlocksPerChunk + b;
        for (const char* name : {"weight", "bias"}) {
          const at::Tensor got = trunk.blocks[size_t(i)]->named_parameters()[name].grad();
          const at::Tensor want = reference.blocks[size_t(i)]->named_parameters()[name].grad();
          if (!got.defined() || !at::equal(got, want)) {
            std::printf("stage %lld: block %lld %s gradient differs from one process's\n", (long long)stage, (long long)i,
                        name);
            ++mismatches;
          }
        }
      }
    if (stage == p - 1 && loss_sum != reference_loss) {
      std::printf("stage %lld: loss %.17g, one process %.17g\n", (long long)stage, loss_sum, reference_loss);
      ++mismatches;
    }
    std::printf("stage %lld: %s, %lld chunk(s), %lld micro-batches: %d gradients differ; loss %.9g; compute %.4f s, "
                "waiting %.4f s\n",
                (long long)stage, argv[1], (long long)step.shape.chunks, (long long)m, mismatches,
                stage == p - 1 ? loss_sum : 0.0, figures.compute_s, figures.wait_s);
    world.barrier();
    return mismatches == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_worker: %s\n", e.what());
    return 1;
  }
}
