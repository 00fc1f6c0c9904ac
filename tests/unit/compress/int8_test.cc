// The int8 compressor: the int8 ring inside the compressor interface (what --compress int8
// sends per step), and its pushes to parameter servers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "collectives/int8_codec.h"
#include "compress/impl/methods.h"
#include "compress/push_codec.h"
#include "compress/registry.h"
#include "exchange_harness.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::gaussian;
using testing::runExchange;

std::vector<float> quantizedOnce(const std::vector<float>& x) {
  std::vector<uint8_t> packed(int8::wireBytes(x.size()));
  int8::quantize(x, packed.data());
  std::vector<float> out(x.size());
  int8::dequantize(packed.data(), x.size(), out.data(), false);
  return out;
}

// The average is allreduceInt8's of the same inputs, bit for bit, on every rank; `sent` is this
// rank's values quantized once; the average is within the ring's bound of the exact one.
TEST(Int8, AveragesThroughTheInt8RingAndReportsTheQuantizedContribution) {
  constexpr int kRanks = 3;
  const size_t n = 5001;
  auto input = [&](int rank) { return gaussian(n, 20 + rank, 0.01f); };
  auto outputs = runExchange(
      kRanks, [] { return methods::makeInt8({}, {}); }, [&](int, int rank) { return input(rank); });
  std::vector<std::vector<float>> ring(kRanks);
  testing::runWithTransports(testing::TransportKind::kLoopback, kRanks, [&](Transport& t) {
    std::vector<float> mine = input(t.rank());
    allreduceInt8(t, mine, ReduceOp::kSum);
    for (float& x : mine) x *= 1.0f / kRanks;
    ring[static_cast<size_t>(t.rank())] = mine;
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(outputs[r].sent, quantizedOnce(input(r))) << "rank " << r;
    EXPECT_EQ(outputs[r].result, ring[0]) << "rank " << r;
    for (size_t i = 0; i < n; i += 97) {
      const float mean = (input(0)[i] + input(1)[i] + input(2)[i]) / kRanks;
      ASSERT_NEAR(outputs[r].result[i], mean, 0.01f * 3 * 4 / 254) << i;  // 3 hops, |x| < 4 sd
    }
  }
}

TEST(Int8, SendsAQuarterOfFloat32) {
  auto int8 = methods::makeInt8({}, {});
  EXPECT_EQ(int8->encodedBytes(4096), 4096 + 4 * sizeof(float));
  EXPECT_EQ(findMethod("int8").name, std::string("int8"));
}

// A push to the servers carries the quantized values; the server decodes exactly them.
TEST(Int8, PushesCarryTheQuantizedValues) {
  const std::vector<float> x = gaussian(3000, 5, 0.1f);
  const TensorShape shape = testing::tensorShape(x.size());
  PushCodec codec(CompressSpec::parse("int8"), {&shape, 1});
  std::vector<uint8_t> bytes;
  codec.encode(x, bytes, 0);
  EXPECT_EQ(bytes.size(), int8::wireBytes(x.size()));
  std::vector<float> decoded(x.size(), 0.0f);
  codec.decodeAdd(bytes, decoded, 0);
  EXPECT_EQ(decoded, quantizedOnce(x));
  bytes.pop_back();
  EXPECT_THROW(codec.decodeAdd(bytes, decoded, 0), ProtocolError);
}

}  // namespace
}  // namespace gradsync
