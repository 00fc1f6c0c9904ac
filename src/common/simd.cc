#include "common/simd.h"

#include <atomic>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "common/check.h"
#include "common/env.h"
#include "common/logging.h"
#include "gradsync/error.h"

namespace gradsync::simd {
namespace {

#if GS_SIMD_X86
// CPUID.1:ECX.F16C (clang's __builtin_cpu_supports does not know "f16c").
bool hasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

Path detect() {
#if GS_SIMD_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && hasF16c() && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  if (avx512) return Path::kAvx512;
  if (avx2) return Path::kAvx2;
#endif
  return Path::kScalar;
}

// GRADSYNC_SIMD lowers the path; a malformed environment is reported by whoever reads it for
// its own options (the CLI, the Python package): here it only costs the override.
Path initial() {
  const Path best = supported();
  std::optional<Path> wanted;
  try {
    wanted = Env::fromProcess().simd;
  } catch (const Error& e) {
    GS_LOG(kWarn, "simd: environment not read ({}); using {}", e.what(), name(best));
  }
  if (!wanted) return best;
  if (static_cast<int>(*wanted) > static_cast<int>(best)) {
    GS_LOG(kWarn, "GRADSYNC_SIMD={}: this CPU supports {} at most; using it", name(*wanted),
           name(best));
    return best;
  }
  return *wanted;
}

constexpr int kUnset = -1;
std::atomic<int> forced{kUnset};

}  // namespace

Path supported() {
  static const Path path = detect();
  return path;
}

Path active() {
  const int path = forced.load(std::memory_order_relaxed);
  if (path != kUnset) return static_cast<Path>(path);
  static const Path chosen = initial();
  return chosen;
}

const char* name(Path path) {
  switch (path) {
    case Path::kScalar:
      return "scalar";
    case Path::kAvx2:
      return "avx2";
    case Path::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<Path> parse(std::string_view text) {
  for (Path path : {Path::kScalar, Path::kAvx2, Path::kAvx512}) {
    if (text == name(path)) return path;
  }
  return std::nullopt;
}

ScopedPath::ScopedPath(Path path) : previous_(forced.load()) {
  GS_CHECK(static_cast<int>(path) <= static_cast<int>(supported()));
  forced.store(static_cast<int>(path));
}

ScopedPath::~ScopedPath() {
  forced.store(previous_);
}

}  // namespace gradsync::simd
