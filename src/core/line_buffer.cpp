// Cutting a byte stream into lines (see line_buffer.h).
#include "core/line_buffer.h"

namespace cadre {

std::vector<std::string> LineBuffer::append(const char* data, size_t size) {
  partial_.append(data, size);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(partial_.substr(start, nl - start));
  partial_.erase(0, start);
  for (; partial_.size() >= max_line_; partial_.erase(0, max_line_)) lines.push_back(partial_.substr(0, max_line_));
  return lines;
}

std::string LineBuffer::take_rest() {
  std::string rest;
  rest.swap(partial_);
  return rest;
}

}  // namespace cadre
