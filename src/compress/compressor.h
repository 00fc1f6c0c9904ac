// Gradient compression: the interface every method implements (docs/algorithms.md,
// "Compression"). A Compressor instance covers one communication unit (one tensor, or the
// tensors of a fusion bucket laid out back to back: the TensorShapes given to its factory) and owns
// that unit's state across steps (PowerSGD's Q, GradiVeQ's basis, DGC's velocity...). Instances are
// not thread-safe: the gradient engine's communication thread is the only caller.
//
// How encodings are combined across ranks follows from the method's nature:
//   kAllreduce  linear encodings (fp16, powersgd, gradiveq, randomk with shared indices) are
//               summed inside the ring all-reduce and decoded once;
//   kAllgather  sparse and quantized encodings are all-gathered (allgatherv) and every rank
//               decodes each rank's encoding and sums;
//   kTree       gtopk: pairwise merges over log2 P rounds, then a broadcast of the result.
//   kHierarchical  hitopk (Shi et al.'s HiTopKComm): dense reduce-scatter inside each host,
//               sparse allgather of each shard across hosts, dense allgather inside each host.
//   kCompressedAllreduce  a quantizer's codes with ",allreduce=on" (compressed_allreduce.h):
//               shards' codes all-to-all, averaged and re-encoded per shard, then all-gathered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/state_bytes.h"
#include "common/tensor_shape.h"
#include "gradsync/clock.h"
#include "gradsync/collectives.h"
#include "gradsync/transport.h"

namespace gradsync {

enum class Aggregation { kAllreduce, kAllgather, kTree, kHierarchical, kCompressedAllreduce };
const char* aggregationName(Aggregation aggregation);

// What one exchange may use. The same on every rank except `transport.rank()`.
struct ExchangeContext {
  Transport& transport;
  CollectiveOptions collective;  // tag of the gradient stream
  uint64_t step = 0;             // global training step (schedules, seeds)
  uint64_t seed = 0;             // run seed, identical on all ranks
  // What encode and decode times are measured with.
  const Clock* clock = &SteadyClock::instance();
};

// A sparsifier that selects elements by magnitude (topk, mstopk) and can be told how many to
// select at its next encode, instead of its density's share of the unit: p3 allots a whole
// tensor's k among the tensor's slices (sync/slice_budgets.h). Once told, it also accepts
// encodings of any count from the other ranks (theirs are allotted by their own gradients).
class SparseBudget {
 public:
  virtual ~SparseBudget() = default;
  virtual double density() const = 0;
  // The next encode selects min(k, its input's size) elements.
  virtual void setBudget(size_t k) = 0;
};

// Measurements of one exchange, summed by the engine into its step statistics.
struct ExchangeStats {
  double encodeSeconds = 0;
  double decodeSeconds = 0;
};

class Compressor {
 public:
  virtual ~Compressor() = default;

  virtual Aggregation aggregation() const = 0;

  // Bytes of this rank's encoding of `elements` values (for kAllreduce: the summed vector, all
  // rounds together). Exact for fixed-size encodings, an upper bound otherwise. Used for buffer
  // sizing, metrics and the simulator's cost model.
  virtual size_t encodedBytes(size_t elements) const = 0;

  // Combines this rank's gradient with every other rank's. On return `grad` holds the average
  // over ranks of what each rank's encoding decodes to, and `sent` this rank's own contribution
  // as decoded (what error feedback subtracts from the input). Both spans have the unit's size.
  // Blocking and collective: every rank calls it for the same unit in the same order.
  // Throws the transport's errors, and ProtocolError on a malformed encoding from a peer.
  virtual void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                        ExchangeStats& stats) = 0;

  // The method's selection budget, if it has one (a sparsifier by magnitude); else null.
  virtual SparseBudget* sparseBudget() { return nullptr; }

  // The state this instance carries from one exchange to the next (error feedback's residual,
  // PowerSGD's Q, DGC's momentum and velocity, GradiVeQ's basis), for checkpoints: restored into
  // a fresh instance for the same unit, the next exchanges repeat the uninterrupted ones
  // bitwise. Stateless methods write nothing. loadState throws DataError when the bytes do not
  // fit this instance (another method or unit). Between exchanges.
  virtual void saveState(StateWriter& out) const { (void)out; }
  virtual void loadState(StateReader& in) { (void)in; }
};

// A compressor whose encoding is a byte string that ranks all-gather (kAllgather). Subclasses
// provide the codec; the exchange is shared.
class CodecCompressor : public Compressor {
 public:
  Aggregation aggregation() const override { return Aggregation::kAllgather; }
  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;

  // Replaces `out` with the encoding of `x`. `seed` differs per rank and step (stochastic
  // methods draw from it; deterministic ones ignore it).
  virtual void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t seed) = 0;
  // out += decode(in). `in` comes from the network: it is validated, and a malformed encoding
  // throws ProtocolError instead of reading or writing out of bounds.
  virtual void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const = 0;

 private:
  std::vector<uint8_t> encoding_;  // reused across exchanges
};

// A linear compressor (kAllreduce): encode(x) is a float vector with encode(a + b) =
// encode(a) + encode(b), so ranks sum encodings inside the ring and decode once.
class LinearCompressor : public Compressor {
 public:
  Aggregation aggregation() const override { return Aggregation::kAllreduce; }
  size_t encodedBytes(size_t elements) const override;
  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;

  // Length of the encoding of `elements` values.
  virtual size_t codeLength(size_t elements) const = 0;
  // How the summed vector travels: float32; IEEE half precision (accumulated in float32); or
  // the int8 ring (allreduceInt8: int8 per hop with a scale per chunk, summed in float32).
  enum class Wire { kFloat, kHalf, kInt8 };
  virtual Wire wire() const { return Wire::kFloat; }
  // code = encode(x); `seed` is the same on every rank (shared randomness).
  virtual void encode(std::span<const float> x, std::span<float> code, uint64_t seed) = 0;
  // out = decode(code), for a code of `x.size()` values encoded with the same seed.
  virtual void decode(std::span<const float> code, std::span<float> out, uint64_t seed) const = 0;
  // True when encode and decode are copies: the exchange then converts the input to the wire's
  // form directly instead of copying it first (one pass over the gradient less).
  virtual bool identityCode() const { return false; }

 private:
  std::vector<float> code_;  // reused across exchanges
  std::vector<uint16_t> half_;
  std::vector<uint8_t> packed_;  // kInt8: this rank's code as the ring's first hop sends it
};

// Parameters of a method, parsed from "name[:value][,key=value...]" (see CompressSpec).
struct MethodArgs {
  double value = 0;  // the ":value"; CompressSpec::parse puts the default there if absent
  bool hasValue = false;
  std::vector<std::pair<std::string, std::string>> keys;  // the ",key=value" options
  double momentum = 0;  // the optimizer's momentum (DGC's momentum correction uses it)
  // The spec's error feedback, for methods that keep their residual themselves (registry.h,
  // MethodInfo::ownErrorFeedback); the others are wrapped in ErrorFeedback instead.
  bool errorFeedback = false;

  // The option `key` as a number, or `fallback` when absent.
  double number(const std::string& key, double fallback) const;
};

}  // namespace gradsync
