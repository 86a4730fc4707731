// Ring collectives over one Gloo context's point-to-point transport: the data-moving halves of
// the Communicator's ops. Buffers are raw host memory; every wait honours one deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace gloo {
class Context;
}

namespace cadre::comm::ring {

using Deadline = std::chrono::steady_clock::time_point;

enum class Elem { F32, I64, BF16, F16 };

// Receive buffers kept between ops so large collectives do not page-fault fresh memory each time;
// a reduce-scatter uses at most one window of them (16 MiB each), whatever the block's size.
struct Scratch {
  char* get(int which, size_t bytes);
  std::unique_ptr<char[]> buffers[2];
  size_t capacity[2] = {0, 0};
};
enum class Combine { Sum, Max };

// `data` holds size() blocks of `block_bytes`; `own` is this rank's contribution, either already
// at data + rank*block_bytes or elsewhere (then it is sent from there and copied in while the
// first exchange is on the wire). On return every block holds its owner's contribution.
void all_gather(gloo::Context& ctx, uint64_t slot, const void* own, void* data, size_t block_bytes,
                Deadline deadline);

// `input` holds size() blocks of `block_elems` elements and is not modified; `output` (one
// block, may alias input's block `rank`) receives the reduction of every rank's block `rank`.
// Float types accumulate in float32 and are divided by `divide_by` (avg) before rounding once;
// with `wide_output` the output holds the accumulation type (float32 for the float types) and
// is not rounded: bf16 inputs then reduce exactly as float32 inputs of the same values would,
// with half the bytes on the first hop (the only one for two ranks).
void reduce_scatter(gloo::Context& ctx, uint64_t slot, const void* input, void* output, size_t block_elems,
                    Elem elem, Combine combine, float divide_by, Deadline deadline, Scratch& scratch,
                    bool wide_output = false);

// `data` (nbytes) on `root` is copied to every other rank.
void broadcast(gloo::Context& ctx, uint64_t slot, void* data, size_t nbytes, int root, Deadline deadline);

}  // namespace cadre::comm::ring
