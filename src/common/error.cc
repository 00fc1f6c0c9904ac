#include "gradsync/error.h"

#include <fmt/format.h>

namespace gradsync {
namespace {

std::string decorate(const std::string& what, const ErrorContext& c) {
  std::string out;
  if (c.rank >= 0) out += fmt::format("[rank {}] ", c.rank);
  if (!c.operation.empty()) out += c.operation + ": ";
  out += what;
  if (c.peer >= 0) out += fmt::format(" (peer rank {})", c.peer);
  if (!c.hint.empty()) out += fmt::format(". Hint: {}", c.hint);
  return out;
}

}  // namespace

Error::Error(const std::string& what, ErrorContext context)
    : std::runtime_error(decorate(what, context)), context_(std::move(context)), detail_(what) {}

int failureOrigin(const Error& error) {
  const ErrorContext& c = error.context();
  if (c.origin >= 0) return c.origin;
  if (c.peer >= 0 && dynamic_cast<const PeerLostError*>(&error)) return c.peer;
  return c.rank;
}

}  // namespace gradsync
