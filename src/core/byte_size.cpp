// parse_byte_size and format_bytes (byte_size.h).
#include "core/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"

namespace cadre {

int64_t parse_byte_size(const std::string& text, const std::string& what) {
  static const std::map<std::string, double> kUnits = {
      {"", 1},          {"B", 1},           {"K", 1024.0},      {"KiB", 1024.0}, {"M", 1048576.0},
      {"MiB", 1048576.0}, {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"T", 1099511627776.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3},  {"MB", 1e6},        {"GB", 1e9},     {"TB", 1e12}};
  size_t end = 0;
  double number = 0;
  try {
    number = std::stod(text, &end);
  } catch (const std::exception&) {
    throw ConfigError(str(what, ": '", text, "' is not a size (a number of bytes, or with a unit: 512MiB, 24GiB, 8GB)"));
  }
  while (end < text.size() && std::isspace(static_cast<unsigned char>(text[end]))) ++end;
  const auto unit = kUnits.find(text.substr(end));
  CADRE_CONFIG_CHECK(unit != kUnits.end(), what, ": '", text, "' has an unknown unit '", text.substr(end),
                     "' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  const double bytes = number * unit->second;
  CADRE_CONFIG_CHECK(std::isfinite(bytes) && bytes >= 0 && bytes < 9.2e18, what, ": '", text,
                     "' is not a size from 0 to 8 EiB");
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  int u = 0;
  while (std::fabs(value) >= 1024 && u < 4) {
    value /= 1024;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.2f %s", value, units[u]);
  return out;
}

}  // namespace cadre
