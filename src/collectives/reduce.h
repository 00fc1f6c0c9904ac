// Element-wise kernels used by the collectives. Plain loops the compiler vectorises (checked
// against a naive reference in tests/unit/collectives).
#pragma once

#include <cstddef>

namespace gradsync {

// dst[i] += src[i]
void addInto(float* dst, const float* src, size_t count);
// data[i] *= factor
void scale(float* data, size_t count, float factor);

}  // namespace gradsync
