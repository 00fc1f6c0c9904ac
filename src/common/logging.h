// Leveled logging to stderr. The level comes from GRADSYNC_LOG_LEVEL (read once, in Env) and is
// set at startup with setLogLevel; each line is prefixed with the time, pid and the rank label of
// the calling thread (threads can act as ranks in tests, so the label is per thread).
// Thread-safe: each line is written with a single write(2).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace gradsync {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Parses "error|warn|info|debug|trace" (or 0..4); throws ConfigError otherwise.
LogLevel parseLogLevel(std::string_view text);
void setLogLevel(LogLevel level);
bool logEnabled(LogLevel level);
// Label printed on every line logged from this thread, e.g. the rank. -1 clears it.
void setThreadLogRank(int rank);
void logLine(LogLevel level, std::string_view message);

}  // namespace gradsync

#define GS_LOG(level, ...)                                                          \
  do {                                                                              \
    if (::gradsync::logEnabled(::gradsync::LogLevel::level))                        \
      ::gradsync::logLine(::gradsync::LogLevel::level, ::fmt::format(__VA_ARGS__)); \
  } while (0)
