// Tensor and module collectives (include/gradsync/torch/collectives.h).
#include "gradsync/torch/collectives.h"

#include <fmt/format.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/tags.h"
#include "gradsync/error.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

// broadcastParameters and broadcastOptimizerState run on their own stream (tags.h).
const CollectiveOptions kApiStream{.tag = tags::kTorchApi};

std::span<float> floatsOf(const torch::Tensor& tensor, const char* what) {
  if (tensor.scalar_type() != torch::kFloat || !tensor.device().is_cpu() ||
      !tensor.is_contiguous()) {
    throw ConfigError(
        fmt::format("{}: the tensor is {} on {}{}", what, toString(tensor.scalar_type()),
                    tensor.device().str(), tensor.is_contiguous() ? "" : ", not contiguous"),
        {.operation = what, .hint = "pass a contiguous float32 tensor on the CPU"});
  }
  return floatSpan(tensor);
}

}  // namespace

void broadcastParameters(torch::nn::Module& module, Transport& transport, int root) {
  torch::NoGradGuard noGrad;
  for (auto& parameter : module.parameters()) {
    broadcast(transport, floatsOf(parameter, "broadcastParameters"), root, kApiStream);
  }
  for (auto& buffer : module.buffers()) {
    if (buffer.is_floating_point()) {
      broadcast(transport, floatsOf(buffer, "broadcastParameters"), root, kApiStream);
    }
  }
}

void broadcastOptimizerState(torch::optim::Optimizer& optimizer, Transport& transport, int root) {
  std::ostringstream out;
  if (transport.rank() == root) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to(out);
  }
  const std::string mine = out.str();
  const std::vector<uint8_t> bytes = broadcastBytes(
      transport, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size()}, root, kApiStream);
  if (transport.rank() == root) return;
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

void allreduce(Transport& transport, torch::Tensor& tensor, ReduceOp op,
               const CollectiveOptions& options) {
  allreduce(transport, floatsOf(tensor, "allreduce"), op, options);
}

void broadcast(Transport& transport, torch::Tensor& tensor, int root,
               const CollectiveOptions& options) {
  broadcast(transport, floatsOf(tensor, "broadcast"), root, options);
}

torch::Tensor allgather(Transport& transport, const torch::Tensor& tensor,
                        const CollectiveOptions& options) {
  std::span<float> mine = floatsOf(tensor, "allgather");
  std::vector<int64_t> shape{transport.size()};
  for (int64_t d : tensor.sizes()) shape.push_back(d);
  torch::Tensor all = torch::empty(shape, torch::kFloat);
  std::memcpy(all[transport.rank()].data_ptr<float>(), mine.data(), mine.size_bytes());
  std::vector<size_t> byteCounts(static_cast<size_t>(transport.size()), mine.size_bytes());
  allgatherv(transport,
             {reinterpret_cast<uint8_t*>(all.data_ptr<float>()),
              static_cast<size_t>(all.numel()) * sizeof(float)},
             byteCounts, options);
  return all;
}

}  // namespace gradsync
