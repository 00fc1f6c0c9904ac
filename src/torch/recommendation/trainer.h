// The worker's loop of a recommendation run (torch/recommendation/recommendation.h): each step
// pulls the rows its batch touches from the embedding servers, agrees with the other workers on
// failed servers (ps/embedding_session.h), trains DLRM, averages the MLPs' gradients over the ring
// (DistributedOptimizer) and pushes the rows' gradients; checkpoints follow the recovery plan,
// and every checkpoint and failure is charged to the run's clock (real or simulated).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

#include "gradsync/torch/distributed_optimizer.h"
#include "ps/embedding_session.h"
#include "torch/loop/progress.h"
#include "torch/recommendation/dlrm.h"
#include "torch/recommendation/recommendation.h"

namespace gradsync {

class RecommendationTrainer {
 public:
  RecommendationTrainer(Transport& ring, EmbeddingConnector* servers,
                        const RecommendationOptions& options);
  RecommendationResult run();

 private:
  struct Timing {            // measured costs until the plan is made (real clock)
    double stepSeconds = 0;  // steps after the first, until the plan
    int steps = 0;
    double saveSeconds = 0;  // the first checkpoint (servers' and the workers')
  };

  int64_t totalSteps() const;
  void readBatch(int64_t step);
  // One step; returns the step to run next (step + 1, or where a recovery puts the run).
  int64_t trainStep(int64_t step, RecommendationResult& result);
  int64_t finalRound(int64_t step);
  // The embedding rows of this step as tensors (pulled, or the local tables): false when the
  // step cannot go on (a recovery ran, moving the run to *next; or a stop was agreed).
  bool gatherRows(int64_t step, std::vector<torch::Tensor>& weights, int64_t* next);
  int64_t recover(const std::vector<int>& failed, int64_t step);
  // Saves due once `steps` steps are complete (EmbFlags).
  uint32_t saveFlags(int64_t steps) const;
  void plan(int64_t step);
  void chargeSaves(const SaveReport& report);
  void saveDense(int64_t steps);
  bool loadDense(int64_t steps);
  bool agreeToStop();
  double evaluate(int64_t step, RecommendationResult& result);
  uint64_t totalAccesses();  // collective
  void finish(RecommendationResult& result) const;

  Transport& ring_;
  const RecommendationOptions options_;
  const TrainOptions& train_;
  std::unique_ptr<ClickData> trainLog_;
  std::unique_ptr<ClickData> testLog_;
  EmbeddingSpec spec_;
  std::shared_ptr<DlrmModel> model_;
  torch::optim::SGD mlpOptimizer_;
  std::unique_ptr<torch::optim::Optimizer> tableOptimizer_;  // local tables only
  std::unique_ptr<DistributedOptimizer> distributed_;
  std::unique_ptr<EmbeddingClient> client_;  // null: local tables
  RecoveryLedger ledger_;
  std::unique_ptr<EmbeddingSession> session_;
  std::unique_ptr<CheckpointDir> dense_;
  std::string identity_;
  RecoveryMode mode_;
  CprKnobs knobs_;
  double restartSeconds_ = 2;
  SimulatedClock sim_;
  std::optional<FailureSpec> failures_;
  CprPlan plan_;
  int64_t interval_ = 0;  // steps between save points (0: none planned yet or at all)
  int64_t planStep_ = 0;  // real clock: the step at which the plan is made from measurements
  std::unique_ptr<Timing> timing_;
  int64_t tick_ = 0;            // steps executed, redone ones included (a real run's failure clock)
  double simTime_ = 0;          // the simulated clock
  int64_t highest_ = 0;         // the most steps ever completed (beyond: not a redone step)
  double stepSaveSeconds_ = 0;  // saves waited for during the current step (real clock)
  bool resumed_ = false;
  bool stopped_ = false;
  ClickBatch batch_;
  EmbeddingBatch rows_;
  std::vector<std::vector<float>> values_;
  std::vector<std::vector<float>> gradients_;
  uint64_t touchedRows_ = 0;  // distinct rows pulled, summed over steps
};

}  // namespace gradsync
