// The methods whose encoding is the gradient itself and whose saving is all in how the ring
// carries it (LinearCompressor::Wire): fp16 (half precision) and int8 (the int8 ring).
#pragma once

#include <algorithm>

#include "compress/compressor.h"

namespace gradsync::methods {

class IdentityOnWire final : public LinearCompressor {
 public:
  explicit IdentityOnWire(Wire wire) : wire_(wire) {}
  size_t codeLength(size_t elements) const override { return elements; }
  Wire wire() const override { return wire_; }
  bool identityCode() const override { return true; }
  void encode(std::span<const float> x, std::span<float> code, uint64_t) override {
    std::copy(x.begin(), x.end(), code.begin());
  }
  void decode(std::span<const float> code, std::span<float> out, uint64_t) const override {
    std::copy(code.begin(), code.end(), out.begin());
  }

 private:
  const Wire wire_;
};

}  // namespace gradsync::methods
