#include "rendezvous/store_util.h"

#include <fmt/format.h>

#include <charconv>

#include "gradsync/error.h"

namespace gradsync::rendezvous {

int64_t parseCounter(const Bytes& value, const std::string& key) {
  if (value.empty()) return 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (ec != std::errc() || ptr != end) {
    throw ProtocolError(fmt::format("value of key '{}' is not an integer counter", key),
                        {.operation = "store.add",
                         .hint = "add() counts only on keys that are never set() to other values"});
  }
  return out;
}

Bytes formatCounter(int64_t value) {
  std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}

int64_t addToCounter(const Bytes& current, int64_t delta, const std::string& key) {
  int64_t result = 0;
  if (__builtin_add_overflow(parseCounter(current, key), delta, &result)) {
    throw ProtocolError(fmt::format("counter '{}' would overflow", key),
                        {.operation = "store.add"});
  }
  return result;
}

std::string describeKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += fmt::format("'{}'", keys[i]);
  }
  if (keys.size() > kShown) out += fmt::format(" and {} more", keys.size() - kShown);
  return out;
}

void throwStoreTimeout(const std::string& operation, const std::vector<std::string>& missing,
                       size_t requested, std::chrono::milliseconds timeout,
                       const std::string& where) {
  throw TimeoutError(
      fmt::format("timed out after {} ms waiting for {} {} (missing {} of {}) in {}",
                  timeout.count(), missing.size() == 1 ? "key" : "keys", describeKeys(missing),
                  missing.size(), requested, where),
      {.operation = operation,
       .hint = "the process that should set it may have failed, not started, or use another "
               "store; check its log"});
}

}  // namespace gradsync::rendezvous
