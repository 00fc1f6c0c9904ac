#include "trace/trace_json.h"

#include "gradsync/trace.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <iterator>

namespace gradsync {
namespace {

bool isContinuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Length of the well-formed UTF-8 sequence starting at text[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when it is malformed. JSON parsers such as
// nlohmann::json refuse malformed UTF-8, and one bad tensor name must not make a trace unreadable.
size_t utf8SequenceLength(std::string_view text, size_t i) {
  auto byte = [&](size_t k) -> unsigned char {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
  };
  unsigned char lead = byte(0);
  unsigned char second = byte(1);
  size_t length = 0;
  bool secondOk = false;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, secondOk = isContinuation(second);
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    unsigned char lo = lead == 0xE0 ? 0xA0 : 0x80;
    unsigned char hi = lead == 0xED ? 0x9F : 0xBF;
    secondOk = second >= lo && second <= hi;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    unsigned char lo = lead == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = lead == 0xF4 ? 0x8F : 0xBF;
    secondOk = second >= lo && second <= hi;
  }
  if (!secondOk) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (!isContinuation(byte(k))) return 0;
  }
  return length;
}

void appendEscaped(std::string& out, unsigned char c) {
  switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
  }
}

}  // namespace

void appendJsonString(std::string& out, std::string_view text) {
  out += '"';
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      size_t length = utf8SequenceLength(text, i);
      if (length == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
        ++i;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    if (c < 0x20 || c == '"' || c == '\\') {
      appendEscaped(out, c);
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
}

void appendInteger(std::string& out, int64_t value) {
  char buffer[24];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, end);
}

void appendMicros(std::string& out, int64_t nanos) {
  // Through uint64_t so that INT64_MIN negates without overflow.
  uint64_t magnitude = nanos < 0 ? 0 - static_cast<uint64_t>(nanos) : static_cast<uint64_t>(nanos);
  char buffer[32];
  char* p = buffer;
  if (nanos < 0) *p++ = '-';
  p = std::to_chars(p, buffer + sizeof(buffer), magnitude / 1000).ptr;
  unsigned fraction = static_cast<unsigned>(magnitude % 1000);
  *p++ = '.';
  *p++ = static_cast<char>('0' + fraction / 100);
  *p++ = static_cast<char>('0' + fraction / 10 % 10);
  *p++ = static_cast<char>('0' + fraction % 10);
  out.append(buffer, p);
}

void appendJsonNumber(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), "{}", value);
}

void TraceArgs::appendKey(std::string_view key) {
  if (!members_.empty()) members_ += ',';
  appendJsonString(members_, key);
  members_ += ':';
}

TraceArgs& TraceArgs::add(std::string_view key, std::string_view value) {
  appendKey(key);
  appendJsonString(members_, value);
  return *this;
}

TraceArgs& TraceArgs::add(std::string_view key, double value) {
  appendKey(key);
  appendJsonNumber(members_, value);
  return *this;
}

TraceArgs& TraceArgs::add(std::string_view key, bool value) {
  appendKey(key);
  members_ += value ? "true" : "false";
  return *this;
}

TraceArgs& TraceArgs::addSigned(std::string_view key, int64_t value) {
  appendKey(key);
  appendInteger(members_, value);
  return *this;
}

TraceArgs& TraceArgs::addUnsigned(std::string_view key, uint64_t value) {
  appendKey(key);
  fmt::format_to(std::back_inserter(members_), "{}", value);
  return *this;
}

}  // namespace gradsync
