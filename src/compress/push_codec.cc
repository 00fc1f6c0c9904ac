#include "compress/push_codec.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "collectives/int8_codec.h"
#include "common/half.h"
#include "common/random.h"
#include "compress/registry.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// Why a method cannot push, or null when it can (see the header).
const char* refusal(const std::string& method) {
  if (method == "powersgd" || method == "gradiveq") {
    return "it exchanges in rounds among the workers, which parameter servers do not have";
  }
  if (method == "gtopk") return "its global selection merges the workers' top-k among them";
  if (method == "hitopk") return "it reduces among the workers of each host, then across hosts";
  if (method == "dgc") {
    return "its momentum correction would apply momentum beside the servers' own";
  }
  return nullptr;
}

size_t elementsOf(std::span<const TensorShape> unit) {
  size_t elements = 0;
  for (const TensorShape& t : unit) elements += t.elements;
  return elements;
}

}  // namespace

bool PushCodec::pushable(const CompressSpec& spec, std::string* why) {
  const char* reason = refusal(spec.method);
  if (reason != nullptr && why != nullptr) *why = reason;
  return reason == nullptr;
}

PushCodec::PushCodec(const CompressSpec& spec, std::span<const TensorShape> unit)
    : elements_(elementsOf(unit)) {
  std::string why;
  if (spec.compressedAllreduce) why = "allreduce=on is an exchange between workers";
  if (spec.dense() || !why.empty() || !pushable(spec, &why)) {
    throw ConfigError(
        fmt::format("--compress {} does not apply through parameter servers{}{}", spec.toString(),
                    why.empty() ? "" : ": ", why),
        {.hint = "over servers use fp16, int8, topk, mstopk, randomk, qsgd, terngrad, "
                 "twobit, onebit or signsgd; or ring ssgd for any method"});
  }
  method_ = findMethod(spec.method).make(spec.args, unit);
  codec_ = dynamic_cast<CodecCompressor*>(method_.get());
  linear_ = dynamic_cast<LinearCompressor*>(method_.get());
  if (codec_ == nullptr && linear_ == nullptr) {
    throw InternalError(fmt::format("compressor {} has no one-rank encoding", spec.method));
  }
  if (spec.errorFeedback) residual_.assign(elements_, 0.0f);
  decay_ = static_cast<float>(spec.errorFeedbackDecay);
  input_.resize(elements_);
  sent_.resize(elements_);
}

PushCodec::~PushCodec() = default;

uint64_t PushCodec::seedFor(uint64_t runSeed, uint64_t step, int rank) const {
  const uint64_t shared = rng::mixSeed(runSeed, step);
  return codec_ != nullptr ? rng::mixSeed(shared, static_cast<uint64_t>(rank)) : shared;
}

size_t PushCodec::maxBytes() const {
  return method_->encodedBytes(elements_);
}

void PushCodec::encode(std::span<const float> grad, std::vector<uint8_t>& out, uint64_t seed) {
  std::span<const float> x = grad;
  if (!residual_.empty()) {  // error feedback: the corrected input
    for (size_t i = 0; i < elements_; ++i) input_[i] = grad[i] + decay_ * residual_[i];
    x = input_;
  }
  if (codec_ != nullptr) {
    codec_->encode(x, out, seed);
  } else {
    code_.resize(linear_->codeLength(elements_));
    linear_->encode(x, code_, seed);
    if (linear_->wire() == LinearCompressor::Wire::kHalf) {
      half_.resize(code_.size());
      halfFromFloat(code_.data(), half_.data(), code_.size());
      out.resize(half_.size() * sizeof(uint16_t));
      std::copy_n(reinterpret_cast<const uint8_t*>(half_.data()), out.size(), out.data());
    } else if (linear_->wire() == LinearCompressor::Wire::kInt8) {
      out.resize(int8::wireBytes(code_.size()));
      int8::quantize(code_, out.data());
    } else {
      out.resize(code_.size() * sizeof(float));
      std::copy_n(reinterpret_cast<const uint8_t*>(code_.data()), out.size(), out.data());
    }
  }
  if (residual_.empty()) return;
  std::fill(sent_.begin(), sent_.end(), 0.0f);
  decodeAdd(out, sent_, seed);
  for (size_t i = 0; i < elements_; ++i) residual_[i] = input_[i] - sent_[i];
}

std::span<const float> PushCodec::sent(std::span<const uint8_t> encoding, uint64_t seed) {
  if (residual_.empty()) {  // with error feedback, encode() left this encoding's decoding there
    std::fill(sent_.begin(), sent_.end(), 0.0f);
    decodeAdd(encoding, sent_, seed);
  }
  return sent_;
}

void PushCodec::decodeAdd(std::span<const uint8_t> in, std::span<float> out, uint64_t seed) const {
  if (codec_ != nullptr) {
    codec_->decodeAdd(in, out);
    return;
  }
  const size_t length = linear_->codeLength(out.size());
  const size_t expected = linear_->encodedBytes(out.size());
  if (in.size() != expected) {
    throw ProtocolError(fmt::format("a push of {} elements carries {} bytes, expected {}",
                                    out.size(), in.size(), expected));
  }
  code_.resize(length);
  if (linear_->wire() == LinearCompressor::Wire::kInt8) {
    int8::dequantize(in.data(), length, code_.data(), false);
  } else if (linear_->wire() == LinearCompressor::Wire::kHalf) {
    half_.resize(length);
    std::copy_n(in.data(), in.size(), reinterpret_cast<uint8_t*>(half_.data()));
    floatFromHalf(half_.data(), code_.data(), length);
  } else {
    // std::copy_n, not memcpy: an empty unit's buffers may be null.
    std::copy_n(in.data(), in.size(), reinterpret_cast<uint8_t*>(code_.data()));
  }
  decoded_.resize(out.size());
  linear_->decode(code_, decoded_, seed);
  for (size_t i = 0; i < out.size(); ++i) out[i] += decoded_[i];
}

void PushCodec::saveState(StateWriter& out) const {
  out.write(residual_);
  method_->saveState(out);
}

void PushCodec::loadState(StateReader& in) {
  in.readExact(residual_);
  method_->loadState(in);
}

}  // namespace gradsync
