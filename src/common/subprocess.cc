#include "common/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "common/socket.h"
#include "gradsync/error.h"

extern char** environ;

namespace gradsync {

std::string ExitStatus::describe() const {
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
  return fmt::format("exited with code {}", code);
}

pid_t spawnProcess(const SpawnOptions& options) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [key, value] : options.env) env[key] = value;
  std::vector<std::string> envStrings;
  for (const auto& [key, value] : env) envStrings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int flags = O_WRONLY | O_CREAT | O_TRUNC;  // not O_CLOEXEC: these must survive the exec
  if (!options.stdoutPath.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, options.stdoutPath.c_str(), flags,
                                     0644);
  }
  if (!options.stderrPath.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, options.stderrPath.c_str(), flags,
                                     0644);
  }
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw SystemError(fmt::format("cannot start '{}': {}", options.argv[0], errnoText(rc)));
  }
  return pid;
}

std::optional<std::pair<pid_t, ExitStatus>> waitAny(const std::vector<pid_t>& pids,
                                                    std::chrono::milliseconds timeout) {
  Deadline deadline(timeout);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    for (pid_t pid : pids) {
      int status = 0;
      pid_t got = ::waitpid(pid, &status, WNOHANG);
      if (got == pid) {
        ExitStatus exit;
        if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
        if (WIFEXITED(status)) exit.code = WEXITSTATUS(status);
        return std::make_pair(pid, exit);
      }
    }
    if (deadline.expired()) return std::nullopt;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::string selfExecutable() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw SystemError("cannot find the running executable (/proc/self/exe)");
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace gradsync
