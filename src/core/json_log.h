// Append-only JSON Lines log: one object per line, flushed per record so a crash loses
// at most the line being written.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace cadre {

class JsonLog {
 public:
  explicit JsonLog(const std::string& path, bool append = true);
  ~JsonLog();
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace cadre
