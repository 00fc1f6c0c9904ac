// Child processes for the local launcher (`gradsync launch`, `--workers N`) and multi-process
// tests. Children are started with posix_spawn, so this is safe to use from threaded programs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gradsync {

struct SpawnOptions {
  std::vector<std::string> argv;           // argv[0] is the program (searched in PATH)
  std::map<std::string, std::string> env;  // added to (or overriding) the parent's environment
  std::string stdoutPath;                  // "" = inherit
  std::string stderrPath;                  // "" = inherit
};

// How a child ended.
struct ExitStatus {
  int code = 0;    // exit code when exited normally
  int signal = 0;  // terminating signal, or 0
  bool ok() const { return signal == 0 && code == 0; }
  std::string describe() const;  // "exited with code 3", "killed by signal 9 (Killed)"
};

// Starts a child; throws SystemError if it cannot be started.
pid_t spawnProcess(const SpawnOptions& options);

// Waits for any of `pids` to end, at most `timeout`. Returns the pid and its status, or nullopt
// on timeout. Ended children are reaped.
std::optional<std::pair<pid_t, ExitStatus>> waitAny(const std::vector<pid_t>& pids,
                                                    std::chrono::milliseconds timeout);

// The path of the running executable (/proc/self/exe), to re-launch ourselves.
std::string selfExecutable();

}  // namespace gradsync
