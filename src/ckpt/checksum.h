// CRC-32C (Castagnoli) of checkpoint pieces: the SSE4.2 instruction where the CPU has it
// (several GB/s, so checking costs little next to the disk), a table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cadre {

// Extends `crc` (0 for a fresh checksum) over `n` bytes.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace cadre
