// The collectives: argument checks, and how each op moves its data (OpPlan): in the header
// exchange when it is small, else through the ring (ring.h) on CPU tensors or NCCL on CUDA
// ones. Communicator::Impl::run drives a plan on the communication thread.
#include <cstring>

#include "comm/communicator_impl.h"

namespace cadre::comm {

namespace {

// For a CUDA tensor, taken on the issuing thread: the op is ordered after the work queued on
// that thread's stream so far (nccl_group.h). Null for CPU tensors, which Gloo moves.
std::shared_ptr<NcclGroup::IssueMark> issue_mark(const at::Tensor& tensor) {
  return tensor.is_cuda() ? NcclGroup::mark_issue(tensor) : nullptr;
}

bool is_narrow_float(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

bool supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kLong;
}

void check_tensor(const at::Tensor& t, const char* op, const char* role) {
  CADRE_CHECK(t.defined(), op, ": ", role, " tensor is undefined");
  CADRE_CHECK(t.device().is_cpu() || (t.device().is_cuda() && NcclGroup::usable()), op, ": ", role, " tensor is on ",
              t.device(), "; Gloo moves CPU tensors and this libtorch has no NCCL for others");
  CADRE_CHECK(supported_dtype(t.scalar_type()), op, ": ", role, " dtype ", t.scalar_type(),
              " is not supported (float32, bfloat16, float16, int64)");
  CADRE_CHECK(t.is_contiguous(), op, ": ", role, " tensor must be contiguous");
}

ring::Elem ring_elem(at::ScalarType t) {
  switch (t) {
    case at::kLong: return ring::Elem::I64;
    case at::kBFloat16: return ring::Elem::BF16;
    case at::kHalf: return ring::Elem::F16;
    default: return ring::Elem::F32;
  }
}
ring::Combine ring_combine(ReduceOp op) { return op == ReduceOp::Max ? ring::Combine::Max : ring::Combine::Sum; }
// Float averages divide inside the ring's last fold (before rounding); int64 ones afterwards.
float ring_divisor(ReduceOp op, at::ScalarType t, int size) {
  return op == ReduceOp::Avg && t != at::kLong ? float(size) : 1.0f;
}

// int64 averages truncate toward zero, as integer division does.
void divide_for_average(at::Tensor block, int size) { block.div_(size, "trunc"); }

// Below this many gathered bytes an all_reduce is one all-gather plus a local reduction: one
// exchange instead of two halves the message round trips that dominate small ops. With
// validation on the same ops carry their data in the header exchange (no extra message).
constexpr int64_t kSmallAllReduceBytes = 256 << 10;
static_assert(size_t(kSmallAllReduceBytes) / 2 <= inband::kMaxPayload, "a 2-rank small op fits one header's payload");

// out = reduction of the rows of `rows` (one per rank) in rank order, so every rank that
// reduces the same rows gets identical bits. Floats accumulate in float32 and round once.
void reduce_rows(const at::Tensor& rows, const at::Tensor& out, ReduceOp op) {
  const int64_t n = rows.size(0);
  const at::ScalarType acc_dtype = rows.scalar_type() == at::kLong ? at::kLong : at::kFloat;
  at::Tensor acc = rows[0].to(acc_dtype);
  for (int64_t r = 1; r < n; ++r) {
    at::Tensor row = rows[r].to(acc_dtype);
    if (op == ReduceOp::Max) acc = at::maximum(acc, row);
    else acc.add_(row);
  }
  if (op == ReduceOp::Avg) {
    if (acc_dtype == at::kLong) divide_for_average(acc, n);
    else acc.div_(n);
  }
  out.view(-1).copy_(acc);
}

// Rows for reduce_rows: this rank's `own` block and each peer's payload from the exchange.
at::Tensor rows_from(const inband::Received& got, int rank, const at::Tensor& own) {
  const int n = static_cast<int>(got.headers.size());
  const int64_t numel = own.numel();
  at::Tensor rows = at::empty({n, numel}, own.options());
  for (int r = 0; r < n; ++r) {
    if (r == rank) rows[r].copy_(own.view(-1));
    else if (numel) std::memcpy(rows[r].data_ptr(), got.payloads[r], numel * own.element_size());
  }
  return rows;
}

std::pair<const void*, size_t> bytes_of(const at::Tensor& t) { return {t.data_ptr(), t.numel() * t.element_size()}; }

void small_all_reduce(Communicator::Impl& impl, uint64_t slot, const at::Tensor& tensor, ReduceOp op,
                      ring::Deadline deadline) {
  const int64_t numel = tensor.numel();
  at::Tensor rows = at::empty({impl.size, numel}, tensor.options());
  ring::all_gather(*impl.context, slot, tensor.data_ptr(), rows.data_ptr(), numel * tensor.element_size(), deadline);
  reduce_rows(rows, tensor, op);
}

// A reduce-scatter and an all-gather over the ring; sizes not divisible by the group size go
// through a zero-padded copy.
void ring_all_reduce(Communicator::Impl& impl, uint64_t slot, const at::Tensor& tensor, ReduceOp op,
                     ring::Deadline deadline) {
  const int n = impl.size, r = impl.rank;
  const int64_t numel = tensor.numel(), block = (numel + n - 1) / n, padded = block * n;
  const at::ScalarType dtype = tensor.scalar_type();
  const bool in_place = padded == numel;
  at::Tensor work = tensor.view(-1);
  if (!in_place) {
    work = at::zeros({padded}, tensor.options());
    work.narrow(0, 0, numel).copy_(tensor.view(-1));
  }
  at::Tensor mine = work.narrow(0, r * block, block);
  ring::reduce_scatter(*impl.context, slot, work.data_ptr(), mine.data_ptr(), block, ring_elem(dtype),
                       ring_combine(op), ring_divisor(op, dtype, n), deadline, impl.scratch);
  if (op == ReduceOp::Avg && dtype == at::kLong) divide_for_average(mine, n);
  ring::all_gather(*impl.context, slot + 1, mine.data_ptr(), work.data_ptr(), block * work.element_size(), deadline);
  if (!in_place) tensor.view(-1).copy_(work.narrow(0, 0, numel));
}

}  // namespace

Work Communicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce", "input");
  OpSignature sig{OpKind::AllReduce, tensor.scalar_type(), tensor.numel(), static_cast<int64_t>(op)};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  const bool small = tensor.numel() * tensor.element_size() * impl->size <= kSmallAllReduceBytes;
  if (small && !tensor.is_cuda()) {
    plan.payload_for = [tensor](int) { return bytes_of(tensor); };
    plan.complete = [impl, tensor, op](const inband::Received& got) {
      if (tensor.numel()) reduce_rows(rows_from(got, impl->rank, tensor), tensor, op);
    };
  }
  plan.move = [impl, tensor, op, small, issued = issue_mark(tensor)](uint64_t slot, ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().all_reduce(*issued, tensor, op));
    if (tensor.numel() == 0) return;
    if (impl->size > 1 && small) return small_all_reduce(*impl, slot, tensor, op, deadline);
    ring_all_reduce(*impl, slot, tensor, op, deadline);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::all_gather_async(at::Tensor output, at::Tensor input) {
  check_tensor(input, "all_gather", "input");
  check_tensor(output, "all_gather", "output");
  CADRE_CHECK(output.scalar_type() == input.scalar_type(), "all_gather: output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  CADRE_CHECK(output.numel() == input.numel() * size(), "all_gather: output has ", output.numel(),
              " elements; expected world size ", size(), " x input ", input.numel());
  OpSignature sig{OpKind::AllGather, input.scalar_type(), input.numel(), 0};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  const size_t block_bytes = input.numel() * input.element_size();
  if (!input.is_cuda() && int64_t(block_bytes) * impl->size <= kSmallAllReduceBytes) {
    plan.payload_for = [input](int) { return bytes_of(input); };
    plan.complete = [impl, output, input, block_bytes](const inband::Received& got) {
      char* out = static_cast<char*>(output.data_ptr());
      for (int r = 0; r < impl->size; ++r) {
        const void* from = r == impl->rank ? input.data_ptr() : got.payloads[r];
        if (block_bytes && from != out + r * block_bytes) std::memcpy(out + r * block_bytes, from, block_bytes);
      }
    };
  }
  plan.move = [impl, output, input, block_bytes, issued = issue_mark(input)](uint64_t slot, ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().all_gather(*issued, output, input));
    if (block_bytes == 0) return;
    ring::all_gather(*impl->context, slot, input.data_ptr(), output.data_ptr(), block_bytes, deadline);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::reduce_scatter_async(at::Tensor output, at::Tensor input, ReduceOp op) {
  check_tensor(input, "reduce_scatter", "input");
  check_tensor(output, "reduce_scatter", "output");
  // A widening reduce-scatter (bf16/f16 in, float32 out) keeps the float32 sum unrounded. Only
  // the input's dtype is validated across ranks: it alone decides what travels between them.
  const bool widening = output.scalar_type() == at::kFloat && is_narrow_float(input.scalar_type());
  CADRE_CHECK(output.scalar_type() == input.scalar_type() || widening, "reduce_scatter: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type(),
              " (a different output dtype must be float32, for bfloat16 or float16 input)");
  CADRE_CHECK(!widening || !input.is_cuda(), "reduce_scatter: ", input.scalar_type(),
              " input with float32 output runs on CPU tensors only; NCCL reduces in one dtype");
  CADRE_CHECK(input.numel() == output.numel() * size(), "reduce_scatter: input has ", input.numel(),
              " elements; expected world size ", size(), " x output ", output.numel());
  OpSignature sig{OpKind::ReduceScatter, input.scalar_type(), input.numel(), static_cast<int64_t>(op)};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  const int64_t block = output.numel();
  if (!input.is_cuda() && input.numel() * input.element_size() <= kSmallAllReduceBytes) {
    // Each peer gets only its own block of this rank's input.
    plan.payload_for = [input, block](int peer) { return bytes_of(input.view(-1).narrow(0, peer * block, block)); };
    plan.complete = [impl, output, input, block, op](const inband::Received& got) {
      // Read this rank's block before writing output (they may alias).
      if (block) reduce_rows(rows_from(got, impl->rank, input.view(-1).narrow(0, impl->rank * block, block)), output, op);
    };
  }
  plan.move = [impl, output, input, op, block, widening, issued = issue_mark(input)](uint64_t slot,
                                                                                     ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().reduce_scatter(*issued, output, input, op));
    if (block == 0) return;
    const at::ScalarType dtype = input.scalar_type();
    ring::reduce_scatter(*impl->context, slot, input.data_ptr(), output.data_ptr(), block, ring_elem(dtype),
                         ring_combine(op), ring_divisor(op, dtype, impl->size), deadline, impl->scratch, widening);
    if (op == ReduceOp::Avg && dtype == at::kLong) divide_for_average(output, impl->size);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::broadcast_async(at::Tensor tensor, int root) {
  check_tensor(tensor, "broadcast", "input");
  CADRE_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is outside the group of ", size());
  OpSignature sig{OpKind::Broadcast, tensor.scalar_type(), tensor.numel(), root};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  if (!tensor.is_cuda() && size_t(tensor.numel() * tensor.element_size()) <= inband::kMaxPayload) {
    plan.payload_for = [impl, tensor, root](int) {
      return impl->rank == root ? bytes_of(tensor) : std::pair<const void*, size_t>(nullptr, 0);
    };
    plan.complete = [impl, tensor, root](const inband::Received& got) {
      if (impl->rank != root && tensor.numel())
        std::memcpy(tensor.data_ptr(), got.payloads[root], tensor.numel() * tensor.element_size());
    };
  }
  plan.move = [impl, tensor, root, issued = issue_mark(tensor)](uint64_t slot, ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().broadcast(*issued, tensor, root));
    ring::broadcast(*impl->context, slot, tensor.data_ptr(), tensor.numel() * tensor.element_size(), root, deadline);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::barrier_async() {
  Impl* impl = impl_.get();
  OpSignature sig;
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  // Validated, the header exchange is the barrier.
  plan.payload_for = [](int) { return std::pair<const void*, size_t>(nullptr, 0); };
  plan.complete = [](const inband::Received&) {};
  plan.move = [impl](uint64_t slot, ring::Deadline deadline) {
    std::vector<int64_t> marks(impl->size, 1);
    ring::all_gather(*impl->context, slot, marks.data() + impl->rank, marks.data(), sizeof(int64_t), deadline);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

}  // namespace cadre::comm
