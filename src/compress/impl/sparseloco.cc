// sparseloco:R[,chunk=C,bits=B] — the codec of SparseLoCo (Sarfi et al. 2025): chunked top-k
// with B-bit values. Each tensor of the unit is cut into chunks of C elements (default 4,096; the
// last one shorter); in a chunk of c elements the k = selectionCount(c, R) of largest magnitude
// (default R = 1/64: 64 of 4,096) are sent, ties to the lower index. Each is an index in its chunk
// (w = bit width of C - 1 bits: 12 for 4,096) and a value code of B bits (default 2): a sign and
// a level l in {0..L-1}, L = 2^(B-1), on a uniform grid between the chunk's smallest and largest
// selected magnitudes lo and hi, decoded as ±(lo + l (hi - lo) / (L - 1)). At B = 2 a value is
// the nearer of lo and hi. The grid starts at lo, not 0 (rtn's grid): every selected magnitude
// is at least lo, so no code is spent on a level the selection never sends. Error feedback is on
// by default and keeps what the selection and the rounding leave; with ef_decay=β and --sync
// diloco:H,outer_momentum=0 the whole is SparseLoCo (docs/algorithms.md).
//
// Wire, little-endian: [lo, hi as float32, per chunk][one (w + B)-bit code per selected element,
// chunk by chunk, ascending index within the chunk, the index in the low w bits] (bit_pack.h's
// layout): 8 bytes per chunk and ceil(K (w + B) / 8) for K selected elements. Deterministic:
// every rank decodes the same encodings to the same bits, and the seed is not used.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "compress/bit_pack.h"
#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"
#include "compress/select.h"
#include "compress/sparse_selection.h"

namespace gradsync::methods {
namespace {

constexpr size_t kParamBytes = 2 * sizeof(float);
constexpr size_t kMaxChunk = size_t{1} << 16;  // indices of at most 16 bits

class SparseLoCoCodec final : public CodecCompressor {
 public:
  SparseLoCoCodec(double density, size_t chunk, int bits, std::span<const TensorShape> unit)
      : density_(density),
        valueBits_(bits),
        indexBits_(std::max(1, static_cast<int>(std::bit_width(chunk - 1)))),
        layout_(unit, chunk) {}

  size_t encodedBytes(size_t elements) const override {
    size_t chunks = 0;
    size_t selected = 0;
    layout_.forEachOrEstimate(elements, [&](size_t, size_t size) {
      ++chunks;
      selected += selectionCount(size, density_);
    });
    return chunks * kParamBytes + packedBytes(selected, codeBits());
  }

  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t) override {
    out.assign(encodedBytes(x.size()), 0);
    uint8_t* params = out.data();
    WideWriter writer(codeBits(), out.data() + layout_.count(x.size()) * kParamBytes);
    layout_.forEachOrEstimate(x.size(), [&](size_t begin, size_t size) {
      const std::span<const float> chunk = x.subspan(begin, size);
      selector_.selectByMagnitude(chunk, selectionCount(size, density_), indices_);
      const Grid grid = gridOf(chunk);
      std::memcpy(params, &grid.lo, sizeof(float));
      std::memcpy(params + sizeof(float), &grid.hi, sizeof(float));
      params += kParamBytes;
      for (uint32_t index : indices_) {
        writer.put(index | static_cast<uint32_t>(grid.code(chunk[index])) << indexBits_);
      }
    });
    writer.finish();
  }

  // Validates the whole encoding (size, every index inside its chunk and strictly ascending)
  // before adding anything, so a malformed one throws ProtocolError with `out` untouched.
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override {
    if (in.size() != encodedBytes(out.size())) {
      throw ProtocolError(fmt::format("sparseloco encoding of {} elements has {} bytes, not {}",
                                      out.size(), in.size(), encodedBytes(out.size())));
    }
    walk(in, out.size(), [](size_t, const Grid&, uint32_t) {});
    walk(in, out.size(), [&](size_t at, const Grid& grid, uint32_t value) {
      const float magnitude = grid.magnitude(value >> 1);
      out[at] += (value & 1) != 0 ? -magnitude : magnitude;
    });
  }

 private:
  // A chunk's grid of magnitudes. A non-finite selected value makes both ends NaN: every
  // selected element of the chunk then decodes as NaN, so the divergence shows.
  struct Grid {
    float lo = 0;
    float hi = 0;
    int levels = 2;

    float step() const { return (hi - lo) / static_cast<float>(levels - 1); }
    uint8_t code(float v) const {
      const float s = step();
      int32_t level = 0;
      if (s > 0 && std::isfinite(s)) {
        level = std::min<int32_t>(static_cast<int32_t>(std::lround((std::fabs(v) - lo) / s)),
                                  levels - 1);
      }
      return static_cast<uint8_t>(level << 1 | (v < 0 ? 1 : 0));
    }
    float magnitude(uint32_t level) const { return lo + static_cast<float>(level) * step(); }
  };

  Grid gridOf(std::span<const float> chunk) const {
    Grid grid{.lo = std::numeric_limits<float>::infinity(), .hi = 0, .levels = levels()};
    for (uint32_t index : indices_) {
      const float magnitude = std::fabs(chunk[index]);
      if (!std::isfinite(magnitude)) {
        grid.lo = grid.hi = std::numeric_limits<float>::quiet_NaN();
        return grid;
      }
      grid.lo = std::min(grid.lo, magnitude);
      grid.hi = std::max(grid.hi, magnitude);
    }
    if (indices_.empty()) grid.lo = 0;
    return grid;
  }

  // Calls fn(element, grid, value code) for every pair of an encoding of `elements` values
  // (its size already checked); throws ProtocolError at an index outside its chunk or out of
  // order.
  template <class Fn>
  void walk(std::span<const uint8_t> in, size_t elements, Fn&& fn) const {
    const uint8_t* params = in.data();
    WideReader reader(codeBits(), in.data() + layout_.count(elements) * kParamBytes);
    const uint32_t indexMask = static_cast<uint32_t>(WideWriter::lowMask(indexBits_));
    layout_.forEachOrEstimate(elements, [&](size_t begin, size_t size) {
      Grid grid{.levels = levels()};
      std::memcpy(&grid.lo, params, sizeof(float));
      std::memcpy(&grid.hi, params + sizeof(float), sizeof(float));
      params += kParamBytes;
      const size_t k = selectionCount(size, density_);
      for (size_t j = 0, previous = 0; j < k; ++j) {
        const uint32_t code = reader.get();
        const size_t index = code & indexMask;
        if (index >= size || (j > 0 && index <= previous)) {
          throw ProtocolError(
              fmt::format("sparseloco encoding: index {} of a chunk of {} elements {}", index, size,
                          index >= size ? "is outside it" : "is not above the one before"));
        }
        previous = index;
        fn(begin + index, grid, code >> indexBits_);
      }
    });
  }

  int codeBits() const { return indexBits_ + valueBits_; }
  int levels() const { return 1 << (valueBits_ - 1); }

  double density_;
  int valueBits_;
  int indexBits_;
  BucketLayout layout_;
  TopKSelector selector_;
  std::vector<uint32_t> indices_;  // reused across chunks and steps
};

}  // namespace

std::unique_ptr<Compressor> makeSparseLoCo(const MethodArgs& args,
                                           std::span<const TensorShape> unit) {
  const double density = checkedDensity(args, "sparseloco");
  const double chunk = args.number("chunk", 4096);
  if (!(chunk >= 1 && chunk <= static_cast<double>(kMaxChunk)) || chunk != std::floor(chunk)) {
    throw ConfigError(fmt::format("sparseloco chunk needs a whole number 1 <= chunk <= {}, got {}",
                                  kMaxChunk, chunk),
                      {.hint = "chunk=4096 selects the top-k of every 4,096 elements"});
  }
  const double bits = args.number("bits", 2);
  if (!(bits >= 2 && bits <= 8) || bits != std::floor(bits)) {
    throw ConfigError(
        fmt::format("sparseloco bits needs a whole number 2 <= bits <= 8, got {}", bits),
        {.hint = "bits=2 sends a sign and one of two magnitudes per value"});
  }
  return std::make_unique<SparseLoCoCodec>(density, static_cast<size_t>(chunk),
                                           static_cast<int>(bits), unit);
}

}  // namespace gradsync::methods
