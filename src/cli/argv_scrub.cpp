// In-place argv scrubbing (see argv_scrub.h).
#include "cli/argv_scrub.h"

#include <cstring>

namespace cadre {
namespace {
int g_argc = 0;
char** g_argv = nullptr;
}  // namespace

void argv_remember(int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
}

void argv_hide(const std::string& secret) {
  if (secret.empty()) return;
  for (int i = 0; i < g_argc; ++i)
    for (char* at = std::strstr(g_argv[i], secret.c_str()); at; at = std::strstr(at + secret.size(), secret.c_str()))
      std::memset(at, '*', secret.size());
}

}  // namespace cadre
