// The worker's model in PsWorkerClient (worker_client.h): copies between the flat buffers and
// the model's tensors, the delayed strategies' local step, and the servers' state in and out
// (publishing it before the first push, pulling it for checkpoints and evaluations).
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/tags.h"
#include "gradsync/error.h"
#include "ps/worker_client.h"

namespace gradsync {

template <typename Fn>
void PsWorkerClient::forEachSegment(size_t unit, Fn&& fn) const {
  const CommUnit& u = s_.layout.units[unit];
  for (int t : u.tensors) {
    size_t lo = std::max(u.offset, s_.layout.offsetOf[t]);
    size_t hi = std::min(u.offset + u.elements, s_.layout.offsetOf[t] + s_.tensors[t].elements);
    if (lo < hi) fn(s_.parameters[t].subspan(lo - s_.layout.offsetOf[t], hi - lo), lo);
  }
}

void PsWorkerClient::copyToParameters(size_t unit, const std::vector<float>& flat) {
  forEachSegment(unit, [&](std::span<float> parameter, size_t at) {
    std::memcpy(parameter.data(), flat.data() + at, parameter.size_bytes());
  });
}

void PsWorkerClient::copyFromParameters(size_t unit, std::vector<float>& flat) const {
  forEachSegment(unit, [&](std::span<float> parameter, size_t at) {
    std::memcpy(flat.data() + at, parameter.data(), parameter.size_bytes());
  });
}

// The local step of the delayed strategies, on this worker's parameters only: SGD with momentum
// whose velocity restarts, at each pull, from the global models' last displacement per step, so
// that the local model follows the global trajectory with the worker's own gradients.
void PsWorkerClient::localUpdate(size_t unit, bool freshPull) {
  const auto lr = static_cast<float>(options_.localLr);
  const auto momentum = static_cast<float>(options_.localMomentum);
  const auto glu = static_cast<float>(options_.glu);
  const bool several = options_.delay == PsOptions::Delay::kSeveralSteps;
  const float seed = 1.0f / (lr * static_cast<float>(span_[unit]));
  forEachSegment(unit, [&](std::span<float> parameter, size_t at) {
    const float* g = s_.gradients.data() + at;
    const float* global = global_.data() + at;
    const float* previous = previous_.data() + at;
    float* velocity = localVelocity_.data() + at;
    for (size_t i = 0; i < parameter.size(); ++i) {
      if (freshPull) velocity[i] = (previous[i] - global[i]) * seed;
      float base = freshPull || !several ? global[i] : parameter[i];
      // SSD-SGD's GLU term stays outside the momentum, as in the reference rule (whose local
      // step has none): inside, the momentum would amplify it tenfold.
      float direction = several ? glu * (previous[i] - global[i]) : 0.0f;
      velocity[i] = momentum * velocity[i] + g[i];
      parameter[i] = base - lr * (velocity[i] + direction);
    }
  });
}

// Rank 0 gives every server its units' parameters (and velocity, after a resume) before its
// first push; the servers hold every push back until then.
void PsWorkerClient::publishState() {
  if (serverModel_.empty()) {  // the parameters are the servers' model
    serverModel_.resize(s_.layout.totalElements);
    for (size_t unit = 0; unit < s_.layout.units.size(); ++unit) {
      copyFromParameters(unit, serverModel_);
    }
  }
  if (!restoredDelayed_) {
    global_ = serverModel_;
    previous_ = global_;
  }
  published_ = true;
  const std::vector<float> model = std::move(serverModel_);
  serverModel_.clear();
  if (transport_.rank() != 0) return;
  std::vector<float> velocity = velocity_.empty()
                                    ? std::vector<float>(s_.layout.totalElements, 0.0f)
                                    : tensorsToLayout(s_.layout, s_.tensors, velocity_);
  std::vector<float> state;
  for (size_t unit = 0; unit < s_.layout.units.size(); ++unit) {
    const CommUnit& u = s_.layout.units[unit];
    auto begin = static_cast<std::ptrdiff_t>(u.offset);
    auto end = begin + static_cast<std::ptrdiff_t>(u.elements);
    state.assign(model.begin() + begin, model.begin() + end);
    state.insert(state.end(), velocity.begin() + begin, velocity.begin() + end);
    sendRequest(options_.placement.serverOf(unit),
                {.request = PsRequest::kSetState,
                 .unit = static_cast<uint32_t>(unit),
                 .payloadBytes = static_cast<uint32_t>(state.size() * sizeof(float))},
                state.data());
  }
}

std::vector<float> PsWorkerClient::optimizerState() {
  std::vector<float> parameters(s_.layout.totalElements), velocity(s_.layout.totalElements);
  std::vector<float> state;
  for (size_t unit = 0; unit < s_.layout.units.size(); ++unit) {
    const CommUnit& u = s_.layout.units[unit];
    const int server = options_.placement.serverOf(unit);
    state.resize(2 * u.elements);
    WorkPtr answer = transport_.recv(options_.placement.serverRank(server), tags::kPsState,
                                     state.data(), state.size() * sizeof(float));
    sendRequest(server, {.request = PsRequest::kGetState, .unit = static_cast<uint32_t>(unit)},
                nullptr);
    try {
      answer->wait();
    } catch (const Error& e) {
      rethrowNamingServer(server, e);
    }
    auto at = static_cast<std::ptrdiff_t>(u.offset);
    auto n = static_cast<std::ptrdiff_t>(u.elements);
    std::copy_n(state.begin(), n, parameters.begin() + at);
    std::copy_n(state.begin() + n, n, velocity.begin() + at);
    copyToParameters(unit, parameters);
  }
  return layoutToTensors(s_.layout, s_.tensors, velocity);
}

void PsWorkerClient::setOptimizerState(std::span<const float> velocity) {
  GS_CHECK(!published_ && velocity.size() == s_.layout.totalElements);
  velocity_.assign(velocity.begin(), velocity.end());
}

bool PsWorkerClient::trainsOwnCopy() const {
  return options_.delay != PsOptions::Delay::kNone ||
         options_.server.consistency != ServerOptions::Consistency::kSync;
}

void PsWorkerClient::saveState(StateWriter& out) const {
  for (const auto& codec : codecs_) {
    if (codec) codec->saveState(out);
  }
  if (options_.delay != PsOptions::Delay::kNone) {
    for (const auto* buffer : {&global_, &previous_, &residual_, &localVelocity_}) {
      out.write(*buffer);
    }
    out.write(span_);
    out.write(std::vector<uint8_t>(freshPull_.begin(), freshPull_.end()));
  }
  if (trainsOwnCopy()) {
    std::vector<float> own(s_.layout.totalElements);
    for (size_t unit = 0; unit < s_.layout.units.size(); ++unit) {
      copyFromParameters(unit, own);
      // A checkpoint holds no prediction: the unit's last reply as it came.
      std::span<const float> pulled =
          predictor_ ? predictor_->pulled(unit) : std::span<const float>();
      std::copy(pulled.begin(), pulled.end(), own.begin() + s_.layout.units[unit].offset);
    }
    out.write(own);
  }
}

void PsWorkerClient::loadState(StateReader& in, uint64_t /*format: the same for the servers*/) {
  GS_CHECK(!published_);
  for (const auto& codec : codecs_) {
    if (codec) codec->loadState(in);
  }
  if (options_.delay != PsOptions::Delay::kNone) {
    for (auto* buffer : {&global_, &previous_, &residual_, &localVelocity_}) {
      in.readExact(*buffer);
    }
    in.readExact(span_);
    std::vector<uint8_t> fresh(freshPull_.size());
    in.readExact(fresh);
    freshPull_.assign(fresh.begin(), fresh.end());
    restoredDelayed_ = true;
  }
  if (trainsOwnCopy()) {
    std::vector<float> own(s_.layout.totalElements);
    in.readExact(own);
    serverModel_.resize(s_.layout.totalElements);
    for (size_t unit = 0; unit < s_.layout.units.size(); ++unit) {
      copyFromParameters(unit, serverModel_);
      copyToParameters(unit, own);
    }
  }
}

}  // namespace gradsync
