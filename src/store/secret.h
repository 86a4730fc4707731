// The per-job secret that every store connection must prove it knows (auth.h). Where it comes
// from: --job-secret-file, or the environment (CADRE_JOB_SECRET_FD: an inherited descriptor,
// which is how `cadre run` hands it to its workers without it appearing in `ps`, in an
// environment or in a log; CADRE_JOB_SECRET_FILE: a file; CADRE_JOB_SECRET: the value, for
// ranks launched by hand); a single-node job generates one.
#pragma once

#include <optional>
#include <string>

namespace cadre::store {

inline constexpr const char* kSecretEnv = "CADRE_JOB_SECRET";
inline constexpr const char* kSecretFileEnv = "CADRE_JOB_SECRET_FILE";
inline constexpr const char* kSecretFdEnv = "CADRE_JOB_SECRET_FD";

// 32 random bytes as 64 hex digits.
std::string job_secret_generate();

// The secret in `text` (one trailing newline dropped), checked: 16 to 4096 bytes, else a
// ConfigError naming `source` and how to make a good one.
std::string job_secret_check(std::string text, const std::string& source);

// Reads and checks a secret file; warns when others than the owner may read it.
std::string job_secret_read_file(const std::string& path);

// From CADRE_JOB_SECRET_FD, CADRE_JOB_SECRET_FILE or CADRE_JOB_SECRET, the first that is set;
// nullopt when none is. ConfigError when the one set is unusable. Once read, the secret stays
// in this process only: the three variables are removed from its environment and the
// descriptor is made close-on-exec, so programs it starts inherit neither; later calls return
// the secret read first.
std::optional<std::string> job_secret_from_environment();

// A sealed in-memory file holding `secret`, close-on-exec: the agent clears that flag in each
// worker (and names the descriptor in CADRE_JOB_SECRET_FD) right before exec.
int job_secret_fd_create(const std::string& secret);

}  // namespace cadre::store
