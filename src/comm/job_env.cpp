// The job's place in the world from the environment `cadre run` (or torchrun-style launchers)
// set: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the job secret.
#include "comm/comm.h"

#include <cstdlib>

#include "core/error.h"
#include "store/secret.h"

namespace cadre::comm {

static int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    CADRE_CONFIG_CHECK(!required, "environment variable ", name,
                       " is not set (run under `cadre run` or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
    return fallback;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  CADRE_CONFIG_CHECK(end && *end == 0, "environment variable ", name, "='", v, "' is not an integer");
  return static_cast<int>(x);
}

JobEnv JobEnv::from_env() {
  JobEnv env;
  env.world_size = env_int("WORLD_SIZE", 1, false);
  env.rank = env_int("RANK", 0, env.world_size > 1);
  env.master_port = env_int("MASTER_PORT", 29500, env.world_size > 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) env.master_addr = a;
  CADRE_CONFIG_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "RANK=", env.rank,
                     " is outside WORLD_SIZE=", env.world_size);
  CADRE_CONFIG_CHECK(env.master_port > 0 && env.master_port < 65536, "MASTER_PORT=", env.master_port, " is not a port");
  if (env.world_size > 1) {
    auto secret = store::job_secret_from_environment();
    CADRE_CONFIG_CHECK(secret, "rank ", env.rank, ": WORLD_SIZE=", env.world_size, " needs the job secret that "
                       "authenticates the store on MASTER_PORT: run under `cadre run`, or set ", store::kSecretEnv,
                       " or ", store::kSecretFileEnv, " (the same on every rank) when launching ranks yourself");
    env.secret = *secret;
  }
  return env;
}

}  // namespace cadre::comm
