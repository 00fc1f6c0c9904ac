// Parsing of human-written quantities in flags and environment variables. Each function throws
// ConfigError naming `what` (the flag or variable) and the accepted forms on malformed input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync {

int64_t parseInteger(std::string_view text, std::string_view what);
// A plain decimal number such as "25" or "0.5".
double parseNumber(std::string_view text, std::string_view what);
// "4096", "64K", "16M", "1G", "2KiB" (powers of 1024) -> bytes.
uint64_t parseBytes(std::string_view text, std::string_view what);
// "1gbit", "100mbit", "500kbit", "2gbps" (bits, decimal), "125MB/s" (bytes, decimal) -> bytes/s.
double parseBandwidth(std::string_view text, std::string_view what);
// "100us", "5ms", "2s", "5min", "8h", "1.5" (seconds) -> seconds.
double parseDurationSeconds(std::string_view text, std::string_view what);
// One item of a comma-separated option list such as "layers=2,width=128" or "on,fc=reduce".
struct OptionItem {
  std::string text;   // the item as written
  std::string key;    // before the first '=' (the whole item when there is none)
  std::string value;  // after it ("" when there is none)
  bool hasValue = false;
};
// The items of `text` in order: "" has none, "a,,b" has an empty middle one (for the caller to
// refuse with its own message).
std::vector<OptionItem> splitOptions(std::string_view text);
// 1536 -> "1.5K"; used in tables.
std::string formatBytes(uint64_t bytes);

}  // namespace gradsync
