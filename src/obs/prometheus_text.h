// Prometheus text exposition (format 0.0.4), the one writer of it: family headers, samples with
// escaped labels, values as Prometheus writes them, and histograms. The agent's job metrics
// (obs/metric_registry) and the server's (serve/metrics) are both written through it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cadre::obs {

using Labels = std::vector<std::pair<std::string, std::string>>;

// `{a="1",b="x\"y"}` with Prometheus escaping (backslash, double quote, newline); "" when empty.
std::string labels_text(const Labels& labels);
// A sample value as Prometheus writes it: integers without exponent, NaN, +Inf, -Inf.
std::string sample_value_text(double value);

// "# HELP name help\n# TYPE name type\n".
std::string family_header(const std::string& name, const std::string& type, const std::string& help);
// "name{labels} value\n".
std::string sample_line(const std::string& name, const Labels& labels, double value);
// A histogram's samples: cumulative `_bucket{le=...}` lines for each upper bound and +Inf,
// `_sum` and `_count`. `counts` has one entry per bound plus the overflow bucket.
std::string histogram_lines(const std::string& name, const std::vector<double>& bounds,
                            const std::vector<uint64_t>& counts, double sum);

}  // namespace cadre::obs
