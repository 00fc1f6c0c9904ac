// Compression over parameter servers (ps/, docs/algorithms.md "Compression over parameter
// servers"): a worker encodes its own gradient for a push and the server decodes each worker's
// push and sums them. The workers never combine among themselves, so a method applies when one
// rank can produce its encoding alone: fp16, topk, mstopk, randomk, qsgd, terngrad, twobit, onebit
// and signsgd. The others are refused with the reason: powersgd and gradiveq exchange in rounds
// among the workers (P then Q; a basis learned from the summed gradient), gtopk merges the
// workers' selections pairwise among them, and dgc's momentum correction would apply momentum
// beside the servers' own.
//
// Seeds follow the ring's exchanges (compressor.cc), so a method encodes alike on both paths:
// codecs draw from (run seed, step, rank), linear methods from (run seed, step). The worker puts
// the seed it used into the push; the server decodes with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/compressor.h"
#include "compress/spec.h"

namespace gradsync {

class PushCodec {
 public:
  // The codec of `spec` for one unit (its tensors' shapes, as the ring's compressor gets them).
  // Throws ConfigError naming the method when it cannot push (see above).
  PushCodec(const CompressSpec& spec, std::span<const TensorShape> unit);
  ~PushCodec();
  PushCodec(const PushCodec&) = delete;
  PushCodec& operator=(const PushCodec&) = delete;

  // Whether `spec` can travel to parameter servers; `why` gets the reason when it cannot.
  static bool pushable(const CompressSpec& spec, std::string* why = nullptr);

  // The seed a push of `step` by `rank` encodes with (and the server decodes with).
  uint64_t seedFor(uint64_t runSeed, uint64_t step, int rank) const;
  // Worker: replaces `out` with the encoding of `grad` plus the residual of earlier pushes (with
  // error feedback), and keeps as the new residual what the server will not decode. Not
  // thread-safe: one caller per unit (its state is the residual and the method's own).
  void encode(std::span<const float> grad, std::vector<uint8_t>& out, uint64_t seed);
  // Server: out += the decoding of a worker's push. `in` comes from the network: a malformed
  // encoding throws ProtocolError. Not thread-safe (linear methods cache per seed).
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out, uint64_t seed) const;
  // Worker, for the compression guard (compress/guard.h): what the server decodes from `encoding`,
  // the last encode()'s output with its seed. With error feedback encode() decoded it already;
  // else it is decoded now. Valid until the next encode() or sent().
  std::span<const float> sent(std::span<const uint8_t> encoding, uint64_t seed);
  // The error-feedback residual after the last encode(); empty without error feedback.
  std::span<const float> residual() const { return residual_; }
  // The most bytes an encoding of this unit takes (a push longer than that is malformed).
  size_t maxBytes() const;
  // Worker: the residual and the method's state, for checkpoints (Compressor::saveState).
  void saveState(StateWriter& out) const;
  void loadState(StateReader& in);

 private:
  std::unique_ptr<Compressor> method_;  // a CodecCompressor or a LinearCompressor
  CodecCompressor* codec_ = nullptr;
  LinearCompressor* linear_ = nullptr;
  const size_t elements_;
  std::vector<float> residual_;  // empty without error feedback
  float decay_ = 1;              // ef_decay: the residual is scaled by it before it is added
  std::vector<float> input_, sent_;
  mutable std::vector<float> code_, decoded_;
  mutable std::vector<uint16_t> half_;
};

}  // namespace gradsync
