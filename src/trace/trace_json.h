// Small JSON writers for the trace recorder. Traces are written by hand rather than through a DOM
// because recording happens on the training and communication threads, where an allocation per
// field would be the dominant cost; these helpers append straight into one output string.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace gradsync {

// Appends `text` as a quoted JSON string. Control characters are escaped; bytes that are not
// valid UTF-8 are replaced with U+FFFD so the output always parses.
void appendJsonString(std::string& out, std::string_view text);

// Appends a decimal integer.
void appendInteger(std::string& out, int64_t value);

// Appends nanoseconds as a JSON number of microseconds with exactly three decimals
// ("12.345"), the unit of Chrome trace "ts" and "dur". Exact: no floating point involved.
void appendMicros(std::string& out, int64_t nanos);

// Appends a double as the shortest JSON number that reads back to the same value; NaN and
// infinities (not representable in JSON) become null.
void appendJsonNumber(std::string& out, double value);

// Key/value arguments attached to a trace event ("args" in the Chrome trace format), e.g.
// TraceArgs().add("tensor", name).add("bytes", n).add("priority", p).
// Holds the members already encoded as JSON, so attaching them to an event is one string move.
// Keys are not de-duplicated: add each key once. Not thread-safe (a value type).
class TraceArgs {
 public:
  TraceArgs& add(std::string_view key, std::string_view value);
  TraceArgs& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  TraceArgs& add(std::string_view key, const std::string& value) {
    return add(key, std::string_view(value));
  }
  TraceArgs& add(std::string_view key, double value);
  TraceArgs& add(std::string_view key, bool value);
  // Integers of any width and signedness (a template, so add("bytes", 3) is not ambiguous
  // between the double and the 64-bit overloads).
  template <std::integral T>
  requires(!std::same_as<T, bool>) TraceArgs& add(std::string_view key, T value) {
    if constexpr (std::is_signed_v<T>) {
      return addSigned(key, static_cast<int64_t>(value));
    } else {
      return addUnsigned(key, static_cast<uint64_t>(value));
    }
  }

  bool empty() const { return members_.empty(); }
  // The members without the surrounding braces: "\"k\":1,\"s\":\"v\"".
  const std::string& members() const { return members_; }

 private:
  TraceArgs& addSigned(std::string_view key, int64_t value);
  TraceArgs& addUnsigned(std::string_view key, uint64_t value);
  void appendKey(std::string_view key);

  std::string members_;
};

}  // namespace gradsync
