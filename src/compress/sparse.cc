#include "compress/sparse.h"

#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

void writeHeader(size_t count, std::vector<uint8_t>& out) {
  GS_CHECK(count <= UINT32_MAX);
  out.resize(sparseBytes(count));
  uint32_t n = static_cast<uint32_t>(count);
  std::memcpy(out.data(), &n, 4);
}

}  // namespace

void encodeSparse(std::span<const uint32_t> indices, std::span<const float> values,
                  std::vector<uint8_t>& out) {
  GS_CHECK_EQ(indices.size(), values.size());
  writeHeader(indices.size(), out);
  if (indices.empty()) return;
  std::memcpy(out.data() + 4, indices.data(), 4 * indices.size());
  std::memcpy(out.data() + 4 + 4 * indices.size(), values.data(), 4 * values.size());
}

void encodeSparseGather(std::span<const float> x, std::span<const uint32_t> indices,
                        std::vector<uint8_t>& out) {
  writeHeader(indices.size(), out);
  if (indices.empty()) return;
  std::memcpy(out.data() + 4, indices.data(), 4 * indices.size());
  uint8_t* values = out.data() + 4 + 4 * indices.size();
  for (size_t i = 0; i < indices.size(); ++i) std::memcpy(values + 4 * i, &x[indices[i]], 4);
}

uint32_t SparseView::index(size_t i) const {
  uint32_t v;
  std::memcpy(&v, indexBytes + 4 * i, 4);
  return v;
}

float SparseView::value(size_t i) const {
  float v;
  std::memcpy(&v, valueBytes + 4 * i, 4);
  return v;
}

SparseView viewSparse(std::span<const uint8_t> in, size_t elements) {
  if (in.size() < 4) throw ProtocolError("sparse encoding shorter than its header");
  uint32_t count;
  std::memcpy(&count, in.data(), 4);
  if (in.size() != sparseBytes(count)) {
    throw ProtocolError(fmt::format("sparse encoding of {} pairs has {} bytes, expected {}", count,
                                    in.size(), sparseBytes(count)));
  }
  SparseView view{count, in.data() + 4, in.data() + 4 + 4 * size_t{count}};
  for (size_t i = 0; i < count; ++i) {
    if (view.index(i) >= elements) {
      throw ProtocolError(fmt::format("sparse encoding names element {} of a {}-element tensor",
                                      view.index(i), elements));
    }
  }
  return view;
}

void decodeSparseAdd(std::span<const uint8_t> in, std::span<float> out) {
  SparseView view = viewSparse(in, out.size());
  for (size_t i = 0; i < view.count; ++i) out[view.index(i)] += view.value(i);
}

}  // namespace gradsync
