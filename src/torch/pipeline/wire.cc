#include "torch/pipeline/wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// A wait that gives up leaves the operation pending on the caller's buffer: abort the transport
// (the run has failed anyway) before the buffer goes.
void waitOrAbort(Transport& transport, Work& work) {
  try {
    work.wait();
  } catch (...) {
    transport.abort(std::current_exception());
    throw;
  }
}

}  // namespace

StageLinks::~StageLinks() {
  try {
    flush();
  } catch (const std::exception& e) {
    GS_LOG(kDebug, "pipeline sends not completed at shutdown: {}", e.what());
  }
}

void StageLinks::reap() {
  while (!sends_.empty() && sends_.front().headerWork->done() &&
         sends_.front().payloadWork->done()) {
    sends_.front().headerWork->wait();  // rethrows a failure
    sends_.front().payloadWork->wait();
    sends_.pop_front();
  }
}

void StageLinks::send(int peer, uint64_t tag, int64_t micro, const torch::Tensor& tensor) {
  reap();
  InFlight flight{std::make_unique<Header>(), tensor.contiguous(), nullptr, nullptr};
  if (flight.tensor.scalar_type() != torch::kFloat || flight.tensor.dim() > 6) {
    throw ConfigError(
        fmt::format("a pipeline stage's output must be float32 with at most 6 "
                    "dimensions, not {} with {}",
                    toString(flight.tensor.scalar_type()), flight.tensor.dim()));
  }
  flight.header->micro = micro;
  flight.header->dims = flight.tensor.dim();
  for (int64_t d = 0; d < flight.tensor.dim(); ++d) flight.header->sizes[d] = flight.tensor.size(d);
  flight.headerWork = transport_.send(peer, tag, flight.header.get(), sizeof(Header));
  flight.payloadWork = transport_.send(peer, tag, flight.tensor.data_ptr<float>(),
                                       static_cast<size_t>(flight.tensor.numel()) * sizeof(float));
  sends_.push_back(std::move(flight));
}

torch::Tensor StageLinks::receive(int peer, uint64_t tag, int64_t micro, double& waited) {
  const auto start = std::chrono::steady_clock::now();
  Header header;
  waitOrAbort(transport_, *transport_.recv(peer, tag, &header, sizeof(Header)));
  const bool shapeOk = header.dims >= 0 && header.dims <= 6 &&
                       std::all_of(header.sizes, header.sizes + header.dims,
                                   [](int64_t s) { return s >= 0 && s < (int64_t{1} << 31); });
  if (!shapeOk || header.micro != micro) {
    throw ProtocolError(fmt::format("pipeline message for micro-batch {} ({} dimensions), "
                                    "expected micro-batch {}",
                                    header.micro, header.dims, micro),
                        {.rank = transport_.rank(),
                         .peer = peer,
                         .operation = "pipeline recv",
                         .hint = "the stages disagree on the schedule: same options everywhere?"});
  }
  torch::Tensor tensor =
      torch::empty(std::vector<int64_t>(header.sizes, header.sizes + header.dims));
  waitOrAbort(transport_, *transport_.recv(peer, tag, tensor.data_ptr<float>(),
                                           static_cast<size_t>(tensor.numel()) * sizeof(float)));
  waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return tensor;
}

void StageLinks::flush() {
  while (!sends_.empty()) {
    waitOrAbort(transport_, *sends_.front().headerWork);
    waitOrAbort(transport_, *sends_.front().payloadWork);
    sends_.pop_front();
  }
}

}  // namespace gradsync
