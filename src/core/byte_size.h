// Sizes in bytes as people write them in configs: "24GiB", "512 MiB", "8GB", "1048576".
#pragma once

#include <cstdint>
#include <string>

namespace cadre {

// Bytes for a number with an optional unit: B, KiB/MiB/GiB/TiB (powers of 1024), KB/MB/GB/TB
// (powers of 1000); K, M, G, T alone read as the binary units. Throws ConfigError naming `what`
// (the key) for anything else, negative sizes or overflow.
int64_t parse_byte_size(const std::string& text, const std::string& what);

// "1.50 GiB", "730.0 MiB", "12 KiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace cadre
