// Small JSON writers for the trace recorder (gradsync/trace.h). Traces are written by hand rather
// than through a DOM because recording happens on the training and communication threads, where an
// allocation per field would be the dominant cost; these helpers append straight into one output
// string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace gradsync
