// mstopk:R[,iters=N] — Shi et al.'s (MLSys'21) multiple-sampling top-k: exactly k = max(1,
// round(R n)) elements found by bisecting a magnitude threshold between mean(|x|) and max(|x|)
// for N iterations (default 20, as in the third-party re-implementations; the paper's own code
// is not public), then filling up to k from the last bracket. Same wire format and exchange as
// topk (4 + 8k bytes per rank, all-gathered), error feedback by default. threshold_select.h
// says how the N counting passes collapse into two and what happens in the corner cases.
#include "compress/impl/methods.h"
#include "compress/sparse_selection.h"
#include "compress/threshold_select.h"

namespace gradsync::methods {
namespace {

class MsTopK final : public SparseSelectionCodec {
 public:
  MsTopK(double density, int iterations) : SparseSelectionCodec(density), selector_(iterations) {}

 protected:
  void select(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) override {
    selector_.select(x, k, indices);
  }

 private:
  ThresholdSelector selector_;
};

}  // namespace

std::unique_ptr<Compressor> makeMsTopK(const MethodArgs& args, std::span<const TensorShape>) {
  const double density = checkedDensity(args, "mstopk");
  const int iterations = checkedIterations(args, "mstopk");
  return std::make_unique<MsTopK>(density, iterations);
}

}  // namespace gradsync::methods
