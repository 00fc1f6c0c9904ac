#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

#include "gradsync/error.h"

namespace gradsync {
namespace {

// Process-wide configuration, set once at startup; atomic so that tests may change it.
std::atomic<int> gLevel{static_cast<int>(LogLevel::kWarn)};
thread_local int tRank = -1;

const char* levelName(LogLevel level) {
  static const char* const kNames[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  return kNames[static_cast<int>(level)];
}

}  // namespace

LogLevel parseLogLevel(std::string_view text) {
  static const char* const kNames[] = {"error", "warn", "info", "debug", "trace"};
  for (int i = 0; i < 5; ++i) {
    if (text == kNames[i] || text == std::to_string(i)) return static_cast<LogLevel>(i);
  }
  throw ConfigError(fmt::format("invalid log level '{}'", text),
                    {.hint = "use one of error, warn, info, debug, trace"});
}

void setLogLevel(LogLevel level) {
  gLevel.store(static_cast<int>(level));
}

bool logEnabled(LogLevel level) {
  return static_cast<int>(level) <= gLevel.load();
}

void setThreadLogRank(int rank) {
  tRank = rank;
}

void logLine(LogLevel level, std::string_view message) {
  auto now = std::chrono::system_clock::now();
  auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(micros / 1000000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  std::string rank = tRank >= 0 ? fmt::format(" rank {}", tRank) : "";
  std::string line =
      fmt::format("gradsync {:02}:{:02}:{:02}.{:06} {} pid {}{}: {}\n", tm.tm_hour, tm.tm_min,
                  tm.tm_sec, micros % 1000000, levelName(level), getpid(), rank, message);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace gradsync
