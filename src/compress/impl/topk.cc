// topk:R — the k = max(1, round(R n)) elements of largest magnitude, exact, ties to the lower
// index, sent as (index, value) pairs and all-gathered (4 + 8k bytes per rank). Error feedback
// wraps it by default: what is not sent waits in the residual (Stich et al. 2018; the
// TopKCompressor of Shi et al.'s code). The selection is the radix select of select.h.
#include "compress/impl/methods.h"
#include "compress/select.h"
#include "compress/sparse_selection.h"

namespace gradsync::methods {
namespace {

class TopK final : public SparseSelectionCodec {
 public:
  using SparseSelectionCodec::SparseSelectionCodec;

 protected:
  void select(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) override {
    selector_.selectByMagnitude(x, k, indices);
  }

 private:
  TopKSelector selector_;
};

}  // namespace

std::unique_ptr<Compressor> makeTopK(const MethodArgs& args, std::span<const TensorShape>) {
  return std::make_unique<TopK>(checkedDensity(args, "topk"));
}

}  // namespace gradsync::methods
