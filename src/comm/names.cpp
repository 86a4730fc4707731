// The names of reductions and dtypes as flags, configs and messages spell them.
#include "comm/comm.h"

#include "core/error.h"

namespace cadre::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "avg") return ReduceOp::Avg;
  if (name == "max") return ReduceOp::Max;
  throw ConfigError(str("unknown reduction '", name, "' (expected sum, avg or max)"));
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "half";
    case at::kLong: return "int64";
    default: return c10::toString(type);
  }
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float" || name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "half" || name == "float16" || name == "fp16") return at::kHalf;
  if (name == "int64" || name == "long" || name == "int64_t") return at::kLong;
  throw ConfigError(str("unsupported dtype '", name, "' (expected float, bfloat16, half or int64)"));
}

}  // namespace cadre::comm
