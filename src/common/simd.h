// Which instruction set the element-wise kernels run (the codecs' loops, half-precision
// conversion): each such kernel is compiled once per path and picks one at run time, so one
// binary runs on any x86-64 and uses AVX2 or AVX-512 where the CPU has them.
//
// The contract every path keeps: **the same bits** as the scalar path, for every input (NaN,
// infinities and subnormals included). Kernels are written as plain loops that the compiler
// vectorises for each target (IEEE arithmetic is not reassociated without -ffast-math, and the
// build passes -ffp-contract=off so no a * b + c becomes a fused multiply-add on the paths
// that have FMA), or with intrinsics whose results are exact; tests force each path
// (ScopedPath) and compare it with the scalar one.
//
// Thread-safety: active() may be called from any thread; ScopedPath is for tests (it changes
// the path of the whole process).
#pragma once

#include <optional>
#include <string_view>

namespace gradsync::simd {

enum class Path { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest path this CPU (and its OS) supports: AVX2 needs AVX2, F16C and BMI2; AVX-512 needs
// F, BW, DQ and VL.
Path supported();

// The path kernels take: supported(), lowered by GRADSYNC_SIMD=scalar|avx2|avx512 (a path the
// CPU lacks falls back to supported(), with a warning), unless a ScopedPath forces one.
Path active();

const char* name(Path path);
// "scalar", "avx2", "avx512"; nullopt for anything else.
std::optional<Path> parse(std::string_view text);

// Forces `path` (which must be supported) for its lifetime; restores the previous choice.
class ScopedPath {
 public:
  explicit ScopedPath(Path path);
  ~ScopedPath();
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;

 private:
  int previous_;
};

}  // namespace gradsync::simd

// Function attributes compiling one function for a path. The scalar path is the build's own
// target (x86-64 baseline). Neither includes FMA's contraction: see -ffp-contract=off above.
#if defined(__x86_64__) && defined(__GNUC__)
#define GS_SIMD_X86 1
#define GS_TARGET_AVX2 __attribute__((target("avx2,f16c,bmi,bmi2,popcnt")))
#define GS_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c,bmi,bmi2,popcnt")))
#else
#define GS_SIMD_X86 0
#define GS_TARGET_AVX2
#define GS_TARGET_AVX512
#endif
