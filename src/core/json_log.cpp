// JSON Lines writer.
#include "core/json_log.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace cadre {

JsonLog::JsonLog(const std::string& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  CADRE_CHECK(file_ != nullptr, "cannot open log '", path, "': ", std::strerror(errno));
}

JsonLog::~JsonLog() {
  if (file_) std::fclose(file_);
}

void JsonLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  CADRE_CHECK(ok, "cannot write to '", path_, "': ", std::strerror(errno));
}

}  // namespace cadre
