// The bucket layout of the quantized encodings and the ",bucket=" option (bucket_codec.h).
#include "compress/bucket_codec.h"

#include <cmath>
#include <limits>

namespace gradsync {

BucketLayout::BucketLayout(std::span<const TensorShape> unit, size_t bucket)
    : bucket_(bucket == 0 ? std::numeric_limits<size_t>::max() : bucket) {
  for (const TensorShape& tensor : unit) {
    total_ += tensor.elements;
    if (tensor.elements > 0) {
      tensors_.push_back(tensor.elements);
      buckets_ += (tensor.elements - 1) / bucket_ + 1;
    }
  }
  // A unit whose tensors are all empty has a known size (0): keep one empty tensor so that
  // forEach still checks the buffer against it instead of treating the shapes as unknown.
  if (tensors_.empty() && !unit.empty()) tensors_.push_back(0);
}

size_t BucketLayout::count(size_t elements) const {
  if (!tensors_.empty() && elements == total_) return buckets_;
  return elements == 0 ? 0 : (elements - 1) / bucket_ + 1;
}

size_t bucketOption(const MethodArgs& args, const char* method, size_t fallback) {
  const double bucket = args.number("bucket", static_cast<double>(fallback));
  // 2^40 elements is far beyond any unit; the bound keeps the conversion to size_t defined.
  if (!(bucket >= 0 && bucket <= 0x1p40) || bucket != std::floor(bucket)) {
    throw ConfigError(fmt::format(
        "{}: bucket={} must be a whole number of elements >= 1, or 0 for one bucket per tensor",
        method, bucket));
  }
  return static_cast<size_t>(bucket);
}

}  // namespace gradsync
