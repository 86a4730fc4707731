// A fingerprint of a set of named tensors' values that does not depend on how they are split:
// the sum (mod 2^64) of a hash of each element's (tensor name, flat index, value rounded to
// bfloat16), so any rank can add the elements it holds, in any order and any number of
// pieces, and the partial sums of all ranks add up to the fingerprint of the whole. Values are
// taken at bfloat16 so that a base held in float32 and the same base held in bfloat16 (or read
// from a bfloat16 file) agree. It tells one set of weights from another (a LoRA checkpoint's
// base); it is no cryptographic digest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cadre {

// The per-tensor key the element hashes start from.
uint64_t value_fingerprint_key(std::string_view tensor_name);

// The sum over j < count of the hash of (key, first + j, values[j]).
uint64_t value_fingerprint(uint64_t key, int64_t first, const float* values, int64_t count);
// The same for bfloat16 values (their bits).
uint64_t value_fingerprint_bf16(uint64_t key, int64_t first, const uint16_t* values, int64_t count);

// "0x0123456789abcdef", for messages and logs.
std::string value_fingerprint_text(uint64_t fingerprint);

}  // namespace cadre
