#include "common/env.h"

#include <unistd.h>

#include "common/units.h"
#include "gradsync/error.h"

extern char** environ;

namespace gradsync {
namespace {

using Vars = std::map<std::string, std::string>;

const std::string* find(const Vars& vars, const std::string& name) {
  auto it = vars.find(name);
  return it == vars.end() || it->second.empty() ? nullptr : &it->second;
}

std::optional<int> intVar(const Vars& vars, const std::string& name) {
  const std::string* value = find(vars, name);
  if (value == nullptr) return std::nullopt;
  return static_cast<int>(parseInteger(*value, name));
}

// 1/true/on/yes or 0/false/off/no; anything else is a ConfigError rather than a silent "off".
bool boolVar(const Vars& vars, const std::string& name, bool fallback = false) {
  const std::string* value = find(vars, name);
  if (value == nullptr) return fallback;
  for (const char* yes : {"1", "true", "on", "yes"}) {
    if (*value == yes) return true;
  }
  for (const char* no : {"0", "false", "off", "no"}) {
    if (*value == no) return false;
  }
  throw ConfigError(name + "=" + *value + " is not a boolean",
                    {.hint = "use 1 or 0 (also true/false, on/off, yes/no)"});
}

// torchrun's agent serves its own store on MASTER_PORT when TORCHELASTIC_USE_AGENT_STORE is
// True (its static rendezvous): gradsync's store then takes the next port.
void resolveMasterPort(const Vars& vars, Env& env) {
  if (find(vars, "GRADSYNC_MASTER_PORT") != nullptr) {
    env.masterPort = intVar(vars, "GRADSYNC_MASTER_PORT");
    env.masterPortFrom = "GRADSYNC_MASTER_PORT";
    return;
  }
  env.masterPort = intVar(vars, "MASTER_PORT");
  const std::string* agentStore = find(vars, "TORCHELASTIC_USE_AGENT_STORE");
  if (env.masterPort && agentStore != nullptr && (*agentStore == "True" || *agentStore == "1")) {
    env.masterPort = *env.masterPort + 1;
    env.masterPortFrom = "MASTER_PORT + 1 (torchrun's agent store holds MASTER_PORT)";
  }
}

}  // namespace

Env Env::fromMap(const Vars& vars) {
  Env env;
  if (const std::string* v = find(vars, "GRADSYNC_LOG_LEVEL")) env.logLevel = parseLogLevel(*v);
  if (find(vars, "RANK") != nullptr || find(vars, "WORLD_SIZE") != nullptr) {
    env.launcher = "env";
    env.rank = intVar(vars, "RANK");
    env.worldSize = intVar(vars, "WORLD_SIZE");
    env.localRank = intVar(vars, "LOCAL_RANK");
    env.localSize = intVar(vars, "LOCAL_WORLD_SIZE");
  } else if (find(vars, "OMPI_COMM_WORLD_RANK") != nullptr) {
    env.launcher = "mpirun";
    env.rank = intVar(vars, "OMPI_COMM_WORLD_RANK");
    env.worldSize = intVar(vars, "OMPI_COMM_WORLD_SIZE");
    env.localRank = intVar(vars, "OMPI_COMM_WORLD_LOCAL_RANK");
    env.localSize = intVar(vars, "OMPI_COMM_WORLD_LOCAL_SIZE");
  }
  if (const std::string* v = find(vars, "MASTER_ADDR")) env.masterAddr = *v;
  resolveMasterPort(vars, env);
  const std::string* jobId = find(vars, "GRADSYNC_JOB_ID");
  env.jobId = jobId != nullptr ? *jobId : "gradsync";
  if (const std::string* v = find(vars, "GRADSYNC_JOB_TOKEN")) {
    env.jobToken = *v;
  } else if (const std::string* ompi = find(vars, "OMPI_MCA_ess_base_jobid")) {
    env.jobToken = "ompi-" + *ompi;
  }
  env.tls = boolVar(vars, "GRADSYNC_TLS");
  env.ranksPerHost = intVar(vars, "GRADSYNC_RANKS_PER_HOST");
  env.sharedMemory = boolVar(vars, "GRADSYNC_SHM", true);
  env.externalStore = boolVar(vars, "GRADSYNC_EXTERNAL_STORE");
  env.restartCount = intVar(vars, "GRADSYNC_RESTART_COUNT").value_or(0);
  if (const std::string* v = find(vars, "GRADSYNC_SIMD")) {
    env.simd = simd::parse(*v);
    if (!env.simd) {
      throw ConfigError("GRADSYNC_SIMD=" + *v + " is not an instruction set",
                        {.hint = "use scalar, avx2 or avx512"});
    }
  }
  if (const std::string* v = find(vars, "GRADSYNC_TIMEOUT")) {
    env.timeoutSeconds = parseDurationSeconds(*v, "GRADSYNC_TIMEOUT");
  }
  return env;
}

Env Env::fromProcess() {
  Vars vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return fromMap(vars);
}

}  // namespace gradsync
