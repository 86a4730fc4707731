// Hides a secret given on the command line (an etcd password in --rdzv-conf) from `ps` and
// /proc/<pid>/cmdline: those show the process's own argv memory, which is overwritten in
// place. Anyone who looked before that moment saw it; the flag's help says to prefer files.
#pragma once

#include <string>

namespace cadre {

void argv_remember(int argc, char** argv);  // main() calls it first
// Overwrites every occurrence of `secret` in the remembered arguments with '*'.
void argv_hide(const std::string& secret);

}  // namespace cadre
