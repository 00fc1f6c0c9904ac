// GS_CHECK: invariants that only a bug in gradsync can break. Throws gradsync::InternalError
// with file, line, the condition and (for the comparison forms) both operand values.
#pragma once

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync::detail {
[[noreturn]] void checkFailed(const char* file, int line, const std::string& message);
}  // namespace gradsync::detail

#define GS_CHECK(cond)                                                       \
  do {                                                                       \
    if (!(cond)) ::gradsync::detail::checkFailed(__FILE__, __LINE__, #cond); \
  } while (0)

#define GS_CHECK_OP_(a, b, op)                                                              \
  do {                                                                                      \
    const auto& gsA_ = (a);                                                                 \
    const auto& gsB_ = (b);                                                                 \
    if (!(gsA_ op gsB_))                                                                    \
      ::gradsync::detail::checkFailed(                                                      \
          __FILE__, __LINE__, fmt::format("{} {} {} ({} vs {})", #a, #op, #b, gsA_, gsB_)); \
  } while (0)

#define GS_CHECK_EQ(a, b) GS_CHECK_OP_(a, b, ==)
#define GS_CHECK_LE(a, b) GS_CHECK_OP_(a, b, <=)
#define GS_CHECK_LT(a, b) GS_CHECK_OP_(a, b, <)
