// The recommendation trainer's evaluation (test AUC and log-loss) and its result; the entry
// point trainRecommendation (torch/recommendation/recommendation.h).
#include <chrono>
#include <cstring>

#include "common/stop_request.h"
#include "common/tags.h"
#include "data/click_metrics.h"
#include "gradsync/collectives.h"
#include "torch/recommendation/trainer.h"

namespace gradsync {
namespace {

std::vector<float> gatherFloats(Transport& ring, const std::vector<float>& mine) {
  const std::vector<std::vector<uint8_t>> all = allgatherBytes(
      ring, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size() * sizeof(float)},
      {.tag = tags::kRecStatus});
  std::vector<float> values;
  for (const auto& bytes : all) {
    const size_t at = values.size();
    values.resize(at + bytes.size() / sizeof(float));
    if (!bytes.empty()) std::memcpy(values.data() + at, bytes.data(), bytes.size());
  }
  return values;
}

}  // namespace

// Each worker scores a block of the first --eval-samples test samples (all by default) with the
// servers' rows after `step` rounds; the scores are gathered and every worker computes the same
// AUC and log-loss. Returns the seconds it took (kept out of the training time).
double RecommendationTrainer::evaluate(int64_t step, RecommendationResult& result) {
  const auto start = std::chrono::steady_clock::now();
  const size_t samples =
      train_.evalSamples > 0 ? std::min(train_.evalSamples, testLog_->size()) : testLog_->size();
  const Block mine = blockOf(samples, ring_.size(), ring_.rank());
  std::vector<float> logits, labels;
  ClickBatch batch;
  torch::NoGradGuard noGrad;
  model_->eval();
  constexpr size_t kChunk = 2048;
  for (size_t first = mine.begin; first < mine.end; first += kChunk) {
    const size_t count = std::min(kChunk, mine.end - first);
    testLog_->read(first, count, batch);
    std::vector<torch::Tensor> weights, positions;
    EmbeddingBatch rows;
    std::vector<std::vector<float>> values;
    const auto n = static_cast<int64_t>(count);
    if (session_) {
      rows = EmbeddingBatch::of(spec_, batch.rows, count);
      client_->read(static_cast<uint64_t>(step), session_->epoch(), rows, values);
    }
    for (int t = 0; t < spec_.tables(); ++t) {
      if (session_) {
        const auto distinct = static_cast<int64_t>(rows.rows[t].size());
        weights.push_back(torch::from_blob(values[t].data(), {distinct, spec_.dim}));
        positions.push_back(torch::from_blob(rows.positions[t].data(), {n}, torch::kLong));
      } else {
        weights.push_back(model_->tables()[t]);
        positions.push_back(
            torch::from_blob(batch.rows.data() + t, {n}, {spec_.tables()}, torch::kLong)
                .contiguous());
      }
    }
    const torch::Tensor out = model_->forward(
        torch::from_blob(batch.dense.data(), {n, kCriteoDenseFeatures}), weights, positions);
    logits.insert(logits.end(), out.data_ptr<float>(), out.data_ptr<float>() + n);
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
  }
  const std::vector<float> allLogits = gatherFloats(ring_, logits);
  const std::vector<float> allLabels = gatherFloats(ring_, labels);
  std::vector<float> probabilities(allLogits.size());
  for (size_t i = 0; i < allLogits.size(); ++i) {
    probabilities[i] = 1.0f / (1.0f + std::exp(-allLogits[i]));
  }
  result.testAuc = rocAuc(allLogits, allLabels);
  result.testLogLoss = logLoss(probabilities, allLabels);
  result.evaluations.push_back({step, result.testAuc, result.testLogLoss});
  result.testLogits = logits;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every access pushed to the servers by every worker: the denominator of the PLS.
uint64_t RecommendationTrainer::totalAccesses() {
  uint64_t mine = 0;
  for (int s = 0; client_ && s < client_->servers(); ++s) mine += client_->accessesPushed(s);
  const auto all = allgatherBytes(ring_, {reinterpret_cast<const uint8_t*>(&mine), sizeof mine},
                                  {.tag = tags::kRecStatus});
  uint64_t total = 0;
  for (const auto& bytes : all) {
    uint64_t value = 0;
    std::memcpy(&value, bytes.data(), sizeof value);
    total += value;
  }
  return total;
}

void RecommendationTrainer::finish(RecommendationResult& result) const {
  for (const torch::Tensor& p : model_->mlpParameters()) {
    const float* data = p.data_ptr<float>();
    result.parameters.insert(result.parameters.end(), data, data + p.numel());
  }
  result.ledger = ledger_;
  result.plan = plan_;
  const double steps = std::max<double>(1, static_cast<double>(tick_));
  if (client_) {
    result.pushBytesPerStep = static_cast<double>(client_->bytesPushed()) / steps;
    result.pullRequestBytesPerStep = static_cast<double>(client_->bytesPulled()) / steps;
  }
  result.touchedRowBytesPerStep =
      static_cast<double>(touchedRows_) * spec_.dim * sizeof(float) / steps;
  result.ringBytesPerStep = static_cast<double>(distributed_->stats().bytesSent) / steps;
}

RecommendationResult trainRecommendation(Transport& ring, EmbeddingConnector* servers,
                                         const RecommendationOptions& options) {
  validateRecommendationOptions(options);
  if (options.train.stopOnSignal) installStopHandlers();
  limitComputeThreads(options.train.threads);
  RecommendationTrainer trainer(ring, servers, options);
  yieldToCommunication();
  RecommendationResult result = trainer.run();
  if (ring.rank() == 0 && !options.train.metricsPath.empty()) {
    writeRecommendationMetrics(options.train.metricsPath, options, ring.size(), result);
  }
  return result;
}

}  // namespace gradsync
