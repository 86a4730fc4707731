// Minimal leveled logging to stderr, prefixed with time and (when known) the rank.
#pragma once

#include <string>

namespace cadre::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_rank(int rank);  // -1: not part of a distributed job
void write(Level level, const std::string& message);

inline void debug(const std::string& m) { write(Level::Debug, m); }
inline void info(const std::string& m) { write(Level::Info, m); }
inline void warn(const std::string& m) { write(Level::Warn, m); }
inline void error(const std::string& m) { write(Level::Error, m); }

}  // namespace cadre::log
