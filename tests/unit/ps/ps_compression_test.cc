// Compressors over parameter servers (compress/push_codec.h) against a naive reference: each
// worker encodes its gradient (plus its error-feedback residual) with the method's own codec,
// the reference decodes every worker's encoding, sums them in worker order, averages and applies
// SGD with momentum, unit by unit, on plain vectors.
#include <gtest/gtest.h>

#include <cstring>

#include <fmt/format.h>

#include "gradsync/error.h"
#include "ps_fixture.h"
#include "push_reference.h"

namespace gradsync::testing {
namespace {

constexpr int kCompressionSteps = 3;

// Small enough that conv.weight (189 elements) is compressed too; the biases stay dense.
CompressionConfig compressionOf(const std::string& spec, int64_t warmup = 0) {
  return {.spec = spec, .minElements = 100, .warmupSteps = warmup};
}

// The servers' parameters after `steps` steps of synchronous SGD on the decoded pushes.
Parameters reference(const Job& job, int steps) {
  CompressionPlan plan = planCompression(job.compression, kTensors, 0.0);
  GradientLayout layout = planLayout(kTensors, ScheduleSpec::parse(job.schedule), plan.groups());
  std::vector<float> p(layout.totalElements), v(layout.totalElements, 0.0f);
  Parameters initial = initialParameters();
  for (size_t t = 0; t < kTensors.size(); ++t) {
    std::copy(initial[t].begin(), initial[t].end(), p.begin() + layout.offsetOf[t]);
  }
  // By worker and unit: the method's instance (its state) and the error-feedback residual.
  std::vector<std::vector<std::unique_ptr<Compressor>>> methods(job.workers);
  std::vector<std::vector<std::vector<float>>> residuals(job.workers);
  for (int r = 0; r < job.workers; ++r) {
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const CompressSpec& spec = plan.perTensor[layout.units[u].tensors.front()];
      std::vector<TensorShape> shapes = unitShapes(layout, u, kTensors);
      methods[r].push_back(spec.dense() ? nullptr
                                        : findMethod(spec.method).make(spec.args, shapes));
      residuals[r].emplace_back(layout.units[u].elements, 0.0f);
    }
  }
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<float>> grads(job.workers, std::vector<float>(layout.totalElements));
    for (int r = 0; r < job.workers; ++r) {
      for (size_t t = 0; t < kTensors.size(); ++t) {
        for (size_t i = 0; i < kTensors[t].elements; ++i)
          grads[r][layout.offsetOf[t] + i] = gradient(r, t, i, s);
      }
    }
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const CommUnit& unit = layout.units[u];
      const bool ef = plan.perTensor[unit.tensors.front()].errorFeedback;
      std::vector<float> sum(unit.elements, 0.0f);
      for (int r = 0; r < job.workers; ++r) {
        std::vector<float> x(grads[r].begin() + unit.offset,
                             grads[r].begin() + unit.offset + unit.elements);
        if (methods[r][u] && s >= job.compression.warmupSteps) {
          std::vector<float>& residual = residuals[r][u];
          if (ef) {
            for (size_t i = 0; i < x.size(); ++i) x[i] += residual[i];
          }
          std::vector<float> decoded = decodedPush(*methods[r][u], x, kPushSeed, s, r);
          if (ef) {
            for (size_t i = 0; i < x.size(); ++i) residual[i] = x[i] - decoded[i];
          }
          x = decoded;
        }
        for (size_t i = 0; i < x.size(); ++i) sum[i] += x[i];
      }
      for (size_t i = 0; i < unit.elements; ++i) {
        float& velocity = v[unit.offset + i];
        velocity = static_cast<float>(kMomentum) * velocity +
                   sum[i] * (1.0f / static_cast<float>(job.workers));
        p[unit.offset + i] -= static_cast<float>(kLr) * velocity;
      }
    }
  }
  Parameters out = initial;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    std::copy_n(p.begin() + layout.offsetOf[t], kTensors[t].elements, out[t].begin());
  }
  return out;
}

struct CompressionCase {
  std::string method;
  int workers = 2;
  int servers = 1;
  bool colocated = true;
  std::string schedule = "wfbp";
  int64_t warmup = 0;

  friend void PrintTo(const CompressionCase& c, std::ostream* os) {
    *os << c.method << " " << c.schedule;
  }
};

class PsCompressionMethods : public ::testing::TestWithParam<CompressionCase> {};

// Every method that can push, over 1 and 2 servers, co-located and apart, whole tensors, fusion
// buckets and p3 slices, with and without error feedback and a dense warm-up.
TEST_P(PsCompressionMethods, MatchesTheNaiveReference) {
  const CompressionCase& c = GetParam();
  Job job{.workers = c.workers,
          .servers = c.servers,
          .colocated = c.colocated,
          .server = {.momentum = kMomentum},
          .schedule = c.schedule,
          .compression = compressionOf(c.method, c.warmup)};
  Parameters expected = reference(job, kCompressionSteps);
  Parameters dense = initialParameters();
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    Engine engine(t, kTensors, job.engine(job.options(), kPushSeed), spansOf(p));
    for (int s = 0; s < kCompressionSteps; ++s) step(engine, t.rank(), s, backwardOrder(t.rank()));
    engine.drain();
    expectClose(p, expected, fmt::format("worker {}", t.rank()), kPushTolerance);
  });
  // Dense training must miss the reference, or this test could not catch pushes sent dense.
  Job denseJob = job;
  denseJob.compression = {};
  Parameters denseResult = reference(denseJob, kCompressionSteps);
  size_t missed = 0;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    for (size_t i = 0; i < kTensors[t].elements; ++i) {
      const double bound = kPushTolerance * (1 + std::fabs(expected[t][i]));
      missed += std::fabs(double{denseResult[t][i]} - expected[t][i]) > bound;
    }
  }
  EXPECT_GT(missed, 0u) << c.method << " changed nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Methods, PsCompressionMethods,
    ::testing::Values(CompressionCase{"fp16"}, CompressionCase{"topk:0.05"},
                      CompressionCase{"mstopk:0.05", 3, 2, false},
                      CompressionCase{"randomk:0.1", 2, 2, true, "fusion:0.01"},
                      CompressionCase{"qsgd:16"}, CompressionCase{"terngrad", 3, 1, false},
                      CompressionCase{"onebit", 2, 2, true, "p3:slice=500"},
                      CompressionCase{"signsgd"},
                      CompressionCase{"topk:0.05,ef=off", 3, 2, false, "p3:slice=3000"},
                      CompressionCase{"qsgd:4", 2, 1, true, "wfbp", 2}),
    [](const auto& info) {
      std::string name =
          fmt::format("{}_{}w_{}s_{}_{}", info.param.method, info.param.workers, info.param.servers,
                      info.param.colocated ? "colocated" : "apart", info.param.schedule);
      if (info.param.warmup > 0) name += "_warmup";
      std::replace_if(
          name.begin(), name.end(), [](char ch) { return !std::isalnum(ch); }, '_');
      return name;
    });

// A sparse push sends a fraction of the dense bytes.
TEST(PsCompression, SendsLessThanDense) {
  Job job{
      .workers = 2, .servers = 2, .colocated = false, .compression = compressionOf("topk:0.01")};
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    Engine engine(t, kTensors, job.engine(), spansOf(p));
    step(engine, t.rank(), 0, backwardOrder(t.rank()));  // rank 0 also sends the servers' state
    engine.drain();
    const StepStats first = engine.totals();
    for (int s = 1; s < kCompressionSteps; ++s) step(engine, t.rank(), s, backwardOrder(t.rank()));
    engine.drain();
    const StepStats totals = engine.totals();
    // Pushes are 1% as (index, value) pairs (2%) plus the dense biases; replies stay dense.
    EXPECT_LT(totals.bytesSent - first.bytesSent, (totals.denseBytes - first.denseBytes) / 10);
  });
}

// Methods whose encoding needs the workers together, and cdsgd (which quantizes its pushes
// itself), are refused before anything is sent, with the reason.
TEST(PsCompression, RefusesWhatCannotPush) {
  for (const char* method : {"powersgd:2", "gradiveq:4", "gtopk:0.01", "dgc:0.01"}) {
    try {
      servedUnits(kTensors, ScheduleSpec::parse("wfbp"), compressionOf(method));
      ADD_FAILURE() << method << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("parameter servers"), std::string::npos) << e.what();
    }
  }
  Job job{.workers = 1, .compression = compressionOf("topk:0.01")};
  PsOptions options = job.options();
  options.delay = PsOptions::Delay::kCompressed;
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    EXPECT_THROW(Engine(t, kTensors, job.engine(options), spansOf(p)), ConfigError);
  });
}

}  // namespace
}  // namespace gradsync::testing
