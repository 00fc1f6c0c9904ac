#include "common/units.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "gradsync/error.h"

namespace gradsync {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "12.5mbit" into 12.5 and "mbit"; throws when no number leads.
std::pair<double, std::string> splitNumber(std::string_view text, std::string_view what,
                                           std::string_view forms) {
  std::string s(text);
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || value < 0) {
    throw ConfigError(fmt::format("invalid value '{}' for {}", text, what),
                      {.hint = fmt::format("expected {}", forms)});
  }
  return {value, lower(std::string_view(end))};
}

[[noreturn]] void badUnit(std::string_view text, std::string_view what, std::string_view forms) {
  throw ConfigError(fmt::format("invalid unit in '{}' for {}", text, what),
                    {.hint = fmt::format("expected {}", forms)});
}

}  // namespace

int64_t parseInteger(std::string_view text, std::string_view what) {
  std::string s(text);
  char* end = nullptr;
  long long value = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') {
    throw ConfigError(fmt::format("invalid integer '{}' for {}", text, what));
  }
  return value;
}

double parseNumber(std::string_view text, std::string_view what) {
  std::string s(text);
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') {
    throw ConfigError(fmt::format("invalid number '{}' for {}", text, what));
  }
  return value;
}

uint64_t parseBytes(std::string_view text, std::string_view what) {
  constexpr std::string_view kForms = "a byte count such as 4096, 64K, 16M, 1G";
  auto [value, unit] = splitNumber(text, what, kForms);
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();  // "16MB" == "16M"
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();   // "16MiB" == "16M"
  double scale = 1;
  if (unit == "k") {
    scale = 1024.0;
  } else if (unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (!unit.empty()) {
    badUnit(text, what, kForms);
  }
  return static_cast<uint64_t>(value * scale);
}

double parseBandwidth(std::string_view text, std::string_view what) {
  constexpr std::string_view kForms = "a rate such as 1gbit, 100mbit, 500kbit or 125MB/s";
  auto [value, unit] = splitNumber(text, what, kForms);
  if (unit.ends_with("ps")) unit = unit.substr(0, unit.size() - 2) + "it";  // gbps -> gbit
  if (unit == "gbit") return value * 1e9 / 8;
  if (unit == "mbit") return value * 1e6 / 8;
  if (unit == "kbit") return value * 1e3 / 8;
  if (unit == "bit") return value / 8;
  if (unit == "gb/s") return value * 1e9;
  if (unit == "mb/s") return value * 1e6;
  if (unit == "kb/s") return value * 1e3;
  if (unit == "b/s") return value;
  badUnit(text, what, kForms);
}

double parseDurationSeconds(std::string_view text, std::string_view what) {
  constexpr std::string_view kForms =
      "a duration such as 100us, 5ms, 2s, 5min, 8h or 1.5 (seconds)";
  auto [value, unit] = splitNumber(text, what, kForms);
  if (unit.empty() || unit == "s") return value;
  if (unit == "ms") return value * 1e-3;
  if (unit == "us") return value * 1e-6;
  if (unit == "ns") return value * 1e-9;
  if (unit == "min") return value * 60;
  if (unit == "h") return value * 3600;
  badUnit(text, what, kForms);
}

std::string formatBytes(uint64_t bytes) {
  const char* const kUnits[] = {"", "K", "M", "G"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{}", bytes) : fmt::format("{:g}{}", v, kUnits[u]);
}

std::vector<OptionItem> splitOptions(std::string_view text) {
  std::vector<OptionItem> items;
  if (text.empty()) return items;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find(',', start), text.size());
    OptionItem item{.text = std::string(text.substr(start, end - start))};
    const size_t equals = item.text.find('=');
    item.hasValue = equals != std::string::npos;
    item.key = item.text.substr(0, equals);
    if (item.hasValue) item.value = item.text.substr(equals + 1);
    items.push_back(std::move(item));
    start = end + 1;
  }
  return items;
}

}  // namespace gradsync
