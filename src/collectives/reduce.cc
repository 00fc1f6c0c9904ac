#include "collectives/reduce.h"

namespace gradsync {

void addInto(float* __restrict dst, const float* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

void addIntoScaled(float* __restrict dst, const float* __restrict src, size_t count, float factor) {
  for (size_t i = 0; i < count; ++i) dst[i] = (dst[i] + src[i]) * factor;
}

void scale(float* data, size_t count, float factor) {
  for (size_t i = 0; i < count; ++i) data[i] *= factor;
}

}  // namespace gradsync
