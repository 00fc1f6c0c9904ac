// gradsync.torch's collectives on the Job's queue (binding.h): Horovod's API
// (python/gradsync/torch/_collectives.py, process sets) and the torch.distributed backend
// (_backend.py) both come here. Each runs on a group of the job's ranks: the whole job (ranks
// empty) or a process set (the ranks, in group-rank order), on the group's own tag, so groups
// that share ranks never read each other's messages.
//
// Two kinds of path: float32 sums and averages take the ring (gradsync/collectives.h); every
// other dtype and reduction moves the tensors' bytes (alltoallvBytes, allgatherv) and reduces
// in the tensor's own dtype, exactly, with LibTorch's kernels. Tensors must be contiguous CPU
// tensors (python/gradsync/torch makes them so).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <numeric>

#include "binding.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/torch/collectives.h"

namespace gradsync::python {
namespace {

// A group of the job's ranks: the whole job when `ranks` is empty.
struct Group {
  std::vector<int> ranks;
  uint64_t tag = 0;
};

// Runs `body` with the group's transport (the job's own for the whole job).
template <typename Body>
void onGroup(Job& job, const Group& group, Body body) {
  if (group.ranks.empty()) return body(job.transport());
  std::unique_ptr<Transport> subset = subsetTransport(job.transport(), group.ranks);
  body(*subset);
}

std::span<uint8_t> bytesOf(const torch::Tensor& tensor) {
  return {static_cast<uint8_t*>(tensor.data_ptr()),
          static_cast<size_t>(tensor.numel() * tensor.element_size())};
}

std::vector<size_t> timesElementSize(const std::vector<size_t>& counts, const torch::Tensor& t) {
  std::vector<size_t> bytes(counts);
  for (size_t& b : bytes) b *= static_cast<size_t>(t.element_size());
  return bytes;
}

// Folds `row` into `into` by `op` (a name of REDUCTIONS in python/gradsync/torch/_ops.py, the
// average summing here), in their dtype.
void fold(torch::Tensor& into, const torch::Tensor& row, const std::string& op) {
  const bool isBool = into.scalar_type() == torch::kBool;
  if (op == "sum" || op == "average") {
    isBool ? into.logical_or_(row) : into.add_(row);
  } else if (op == "product") {
    isBool ? into.logical_and_(row) : into.mul_(row);
  } else if (op == "min") {
    into = torch::minimum(into, row);
  } else if (op == "max") {
    into = torch::maximum(into, row);
  } else if (op == "band") {
    into.bitwise_and_(row);
  } else if (op == "bor") {
    into.bitwise_or_(row);
  } else if (op == "bxor") {
    into.bitwise_xor_(row);
  } else {
    throw ConfigError(fmt::format("unknown reduction {}", op), {.operation = "allreduce"});
  }
}

// `blocks` (one row per rank) reduced along the ranks by `op`, in their dtype, one rank after
// another in rank order: every rank that reduces the same rows gets the same bits.
torch::Tensor reduceRows(const torch::Tensor& blocks, const std::string& op) {
  const auto dtype = blocks.scalar_type();
  const bool bitwise = op == "band" || op == "bor" || op == "bxor";
  if (bitwise && torch::isFloatingType(dtype)) {
    throw ConfigError(fmt::format("bitwise {} of {} tensors", op, c10::toString(dtype)),
                      {.operation = "allreduce", .hint = "bitwise reductions take integers"});
  }
  if (op == "average" && !torch::isFloatingType(dtype)) {
    throw ConfigError(
        fmt::format("the average of {} tensors is not exact: use op=Sum", c10::toString(dtype)),
        {.operation = "allreduce", .hint = "or convert the tensor with .float()"});
  }
  torch::Tensor out = blocks[0].clone();
  for (int64_t r = 1; r < blocks.size(0); ++r) fold(out, blocks[r], op);
  if (op == "average") out.div_(static_cast<double>(blocks.size(0)));
  return out;
}

// Reduce-scatter of any dtype: block j of `input` (counts[j] elements) goes to group rank j,
// which reduces the blocks it received, in rank order, into `output` (counts[own] elements).
// One message to and from each other rank: (P-1)/P of the input on the wire, as the ring's.
void reduceScatterAny(Transport& t, const torch::Tensor& input, torch::Tensor& output,
                      const std::vector<size_t>& counts, const std::string& op, uint64_t tag) {
  const auto size = static_cast<size_t>(t.size());
  if (counts.size() != size) {
    throw ConfigError(fmt::format("reducescatter: {} counts for {} ranks", counts.size(), size));
  }
  const size_t own = counts[static_cast<size_t>(t.rank())];
  if (static_cast<size_t>(input.numel()) != std::accumulate(counts.begin(), counts.end(), 0ul) ||
      static_cast<size_t>(output.numel()) != own) {
    throw ConfigError(
        fmt::format("reducescatter: the input holds {} elements and the output {}, "
                    "for blocks of {} elements",
                    input.numel(), output.numel(), fmt::join(counts, ", ")));
  }
  torch::Tensor blocks =
      torch::empty({static_cast<int64_t>(size), static_cast<int64_t>(own)}, input.options());
  const std::vector<size_t> ownBytes(size, own * input.element_size());
  alltoallvBytes(t, bytesOf(input), timesElementSize(counts, input), bytesOf(blocks), ownBytes,
                 {.tag = tag});
  output.copy_(reduceRows(blocks, op));
}

// Allgather of any dtype: rank r's `input` (counts[r] elements) lands at its offset in `output`.
void allgatherAny(Transport& t, const torch::Tensor& input, torch::Tensor& output,
                  const std::vector<size_t>& counts, uint64_t tag) {
  const size_t before = std::accumulate(
      counts.begin(), counts.begin() + std::min<size_t>(t.rank(), counts.size()), 0ul);
  if (counts.size() != static_cast<size_t>(t.size()) ||
      counts[static_cast<size_t>(t.rank())] != static_cast<size_t>(input.numel()) ||
      static_cast<size_t>(output.numel()) != std::accumulate(counts.begin(), counts.end(), 0ul)) {
    throw ConfigError(
        fmt::format("allgather: {} elements here, {} in the output, for blocks of "
                    "{} elements over {} ranks",
                    input.numel(), output.numel(), fmt::join(counts, ", "), t.size()));
  }
  std::memcpy(bytesOf(output).data() + before * input.element_size(), input.data_ptr(),
              bytesOf(input).size());
  allgatherv(t, bytesOf(output), timesElementSize(counts, input), {.tag = tag});
}

// Allreduce of any dtype and reduction: reduceScatterAny on blocks of equal size (to one
// element), then allgatherAny; in place on `tensor`.
void allreduceAny(Transport& t, torch::Tensor& tensor, const std::string& op, uint64_t tag) {
  const auto size = static_cast<size_t>(t.size());
  const auto count = static_cast<size_t>(tensor.numel());
  std::vector<size_t> counts(size);
  for (size_t r = 0; r < size; ++r)
    counts[r] = blockOf(count, t.size(), static_cast<int>(r)).size();
  torch::Tensor flat = tensor.view(-1);
  torch::Tensor block =
      torch::empty({static_cast<int64_t>(counts[static_cast<size_t>(t.rank())])}, tensor.options());
  reduceScatterAny(t, flat, block, counts, op, tag);
  allgatherAny(t, block, flat, counts, tag);
}

// Broadcast of any dtype: float words where the bytes allow, else the byte path.
void broadcastAny(Transport& t, torch::Tensor& tensor, int root, uint64_t tag) {
  std::span<uint8_t> bytes = bytesOf(tensor);
  if (bytes.size() % sizeof(float) == 0) {
    std::span<float> words(reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float));
    broadcast(t, words, root, {.tag = tag});
    return;
  }
  std::vector<uint8_t> all = broadcastBytes(t, bytes, root, {.tag = tag});
  std::memcpy(bytes.data(), all.data(), bytes.size());
}

// `root`'s bytes to every rank of `t`, as a string.
std::string broadcastString(Transport& t, const std::string& mine, int root, uint64_t tag) {
  std::vector<uint8_t> all = broadcastBytes(
      t, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size()}, root, {.tag = tag});
  return {all.begin(), all.end()};
}

// Runs `operation` on the job's queue and waits without the GIL: collectives keep one order.
template <typename Operation>
void runQueued(Job& job, Operation operation) {
  std::shared_ptr<Handle> handle = job.submit(std::move(operation));
  py::gil_scoped_release noGil;
  handle->wait();
}

// Point-to-point: started at once on the caller's thread (never queued behind a collective
// that may wait for this very message); the transport's Work says when it is done.
WorkPtr sendOrRecv(Job& job, const Group& group, bool send, torch::Tensor tensor, int peer) {
  WorkPtr work;
  onGroup(job, group, [&](Transport& t) {
    if (peer < 0 || peer >= t.size() || peer == t.rank()) {
      throw ConfigError(fmt::format("{} with rank {} of a group of {} (this is rank {})",
                                    send ? "send" : "recv", peer, t.size(), t.rank()));
    }
    std::span<uint8_t> bytes = bytesOf(tensor);
    work = send ? t.send(peer, group.tag, bytes.data(), bytes.size())
                : t.recv(peer, group.tag, bytes.data(), bytes.size());
  });
  return work;
}

}  // namespace

void bindCollectives(py::module_& m) {
  py::class_<Group>(m, "Group")
      .def(py::init<std::vector<int>, uint64_t>(), py::arg("ranks"), py::arg("tag"))
      .def_readonly("ranks", &Group::ranks)
      .def_readonly("tag", &Group::tag);
  py::class_<Work, std::shared_ptr<Work>>(m, "Work")
      .def("wait", &Work::wait, py::call_guard<py::gil_scoped_release>())
      .def("done", &Work::done);
  const Group all{};

  m.def(
      "allreduce_async",
      [](Job& job, torch::Tensor tensor, bool average, const Group& group) {
        return job.submit([&job, tensor, average, group]() mutable {
          onGroup(job, group, [&](Transport& t) {
            allreduce(t, tensor, average ? ReduceOp::kAverage : ReduceOp::kSum, {.tag = group.tag});
          });
        });
      },
      py::arg("job"), py::arg("tensor"), py::arg("average"), py::arg("group") = all);
  // Any dtype, any reduction ("sum", "average", "min", "max", "product", "band", "bor",
  // "bxor"), in place.
  m.def(
      "allreduce_any_async",
      [](Job& job, torch::Tensor tensor, std::string op, const Group& group) {
        return job.submit([&job, tensor, op, group]() mutable {
          onGroup(job, group, [&](Transport& t) { allreduceAny(t, tensor, op, group.tag); });
        });
      },
      py::arg("job"), py::arg("tensor"), py::arg("op"), py::arg("group") = all);
  m.def(
      "reducescatter_async",
      [](Job& job, torch::Tensor input, torch::Tensor output, std::vector<size_t> counts,
         std::string op, const Group& group) {
        return job.submit([&job, input, output, counts, op, group]() mutable {
          onGroup(job, group,
                  [&](Transport& t) { reduceScatterAny(t, input, output, counts, op, group.tag); });
        });
      },
      py::arg("job"), py::arg("input"), py::arg("output"), py::arg("counts"), py::arg("op"),
      py::arg("group") = all);
  // Every rank's `input`, counts[r] elements each, back to back in `output` by rank.
  m.def(
      "allgatherv_async",
      [](Job& job, torch::Tensor input, torch::Tensor output, std::vector<size_t> counts,
         const Group& group) {
        return job.submit([&job, input, output, counts, group]() mutable {
          onGroup(job, group,
                  [&](Transport& t) { allgatherAny(t, input, output, counts, group.tag); });
        });
      },
      py::arg("job"), py::arg("input"), py::arg("output"), py::arg("counts"),
      py::arg("group") = all);
  // alltoallv in elements of the tensors' dtype (gradsync/collectives.h).
  m.def(
      "alltoallv_async",
      [](Job& job, torch::Tensor input, std::vector<size_t> sendCounts, torch::Tensor output,
         std::vector<size_t> recvCounts, const Group& group) {
        return job.submit([&job, input, sendCounts, output, recvCounts, group]() mutable {
          onGroup(job, group, [&](Transport& t) {
            alltoallvBytes(t, bytesOf(input), timesElementSize(sendCounts, input), bytesOf(output),
                           timesElementSize(recvCounts, output), {.tag = group.tag});
          });
        });
      },
      py::arg("job"), py::arg("input"), py::arg("send_counts"), py::arg("output"),
      py::arg("recv_counts"), py::arg("group") = all);
  m.def(
      "broadcast_async",
      [](Job& job, torch::Tensor tensor, int root, const Group& group) {
        return job.submit([&job, tensor, root, group]() mutable {
          onGroup(job, group, [&](Transport& t) { broadcastAny(t, tensor, root, group.tag); });
        });
      },
      py::arg("job"), py::arg("tensor"), py::arg("root"), py::arg("group") = all);
  m.def(
      "barrier_async",
      [](Job& job, const Group& group) {
        return job.submit([&job, group] {
          onGroup(job, group, [&](Transport& t) { barrier(t, {.tag = group.tag}); });
        });
      },
      py::arg("job"), py::arg("group") = all);
  m.def(
      "barrier",
      [](Job& job, const Group& group) {
        runQueued(job, [&] {
          onGroup(job, group, [&](Transport& t) { barrier(t, {.tag = group.tag}); });
        });
      },
      py::arg("job"), py::arg("group") = all);
  m.def(
      "broadcast_bytes",
      [](Job& job, py::bytes bytes, int root, const Group& group) {
        std::string mine = bytes, all;
        runQueued(job, [&] {
          onGroup(job, group,
                  [&](Transport& t) { all = broadcastString(t, mine, root, group.tag); });
        });
        return py::bytes(all);
      },
      py::arg("job"), py::arg("bytes"), py::arg("root"), py::arg("group") = all);
  m.def(
      "allgather_bytes",
      [](Job& job, py::bytes bytes, const Group& group) {
        std::string mine = bytes;
        std::vector<std::vector<uint8_t>> all;
        runQueued(job, [&] {
          onGroup(job, group, [&](Transport& t) {
            all = allgatherBytes(t, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size()},
                                 {.tag = group.tag});
          });
        });
        py::list out;
        for (const auto& b : all)
          out.append(py::bytes(reinterpret_cast<const char*>(b.data()), b.size()));
        return out;
      },
      py::arg("job"), py::arg("bytes"), py::arg("group") = all);
  // The caller keeps `tensor` alive, unchanged (send) or untouched (recv), until the Work is done.
  m.def("send", [](Job& job, torch::Tensor tensor, int peer, const Group& group) {
    return sendOrRecv(job, group, true, std::move(tensor), peer);
  });
  m.def("recv", [](Job& job, torch::Tensor tensor, int peer, const Group& group) {
    return sendOrRecv(job, group, false, std::move(tensor), peer);
  });
}

}  // namespace gradsync::python
