#include "exchange_harness.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "support/transports.h"

namespace gradsync::testing {

std::vector<RankExchange> runExchange(
    int ranks, const std::function<std::unique_ptr<Compressor>()>& make,
    const std::function<std::vector<float>(int step, int rank)>& inputs, int steps, uint64_t seed) {
  std::vector<RankExchange> out(ranks);
  runWithTransports(TransportKind::kLoopback, ranks, [&](Transport& transport) {
    int rank = transport.rank();
    auto compressor = make();
    ExchangeStats stats;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> grad = inputs(s, rank);
      std::vector<float> sent(grad.size());
      ExchangeContext context{transport, {}, static_cast<uint64_t>(s), seed};
      compressor->exchange(context, grad, sent, stats);
      out[rank] = {std::move(grad), std::move(sent)};
    }
  });
  return out;
}

TensorShape tensorShape(size_t elements, std::vector<int64_t> dims) {
  if (dims.empty()) dims = {static_cast<int64_t>(elements)};
  return {"t", std::move(dims), elements};
}

MethodArgs withValue(double value) {
  MethodArgs args;
  args.value = value;
  args.hasValue = true;
  return args;
}

MethodArgs withOption(const std::string& key, double value) {
  MethodArgs args;
  args.keys.emplace_back(key, fmt::format("{}", value));
  return args;
}

::testing::AssertionResult sameBits(const std::vector<float>& got,
                                    const std::vector<float>& expected) {
  if (got.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << expected.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(expected[i])) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << " vs " << expected[i];
    }
  }
  return ::testing::AssertionSuccess();
}

double maxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

std::vector<float> gaussian(size_t count, uint64_t seed, float scale) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (float& v : values) v = normal(engine);
  return values;
}

}  // namespace gradsync::testing
