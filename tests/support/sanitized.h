// Whether this test binary runs under a sanitizer (cmake/Sanitize.cmake defines
// GRADSYNC_SANITIZED): tests size their largest cases down there, since ThreadSanitizer runs
// code 5-15 times slower, and keep the release build's sizes everywhere else.
#pragma once

#include <cstddef>

namespace gradsync::testing {

#ifdef GRADSYNC_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// `full` in the release build, `reduced` under a sanitizer.
constexpr size_t sanitizedSize(size_t full, size_t reduced) {
  return kSanitized ? reduced : full;
}

}  // namespace gradsync::testing
