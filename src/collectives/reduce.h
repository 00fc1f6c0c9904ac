// Element-wise kernels used by the collectives. Plain loops the compiler vectorises (checked
// against a naive reference in tests/unit/collectives).
#pragma once

#include <cstddef>

namespace gradsync {

// dst[i] += src[i]
void addInto(float* dst, const float* src, size_t count);
// data[i] *= factor
void scale(float* data, size_t count, float factor);
// dst[i] = (dst[i] + src[i]) * factor: the last addition of an average and its scaling in one
// pass (the same two roundings as addInto then scale).
void addIntoScaled(float* dst, const float* src, size_t count, float factor);

}  // namespace gradsync
