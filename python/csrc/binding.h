// The Python extension gradsync._C (python/gradsync/torch wraps it): a thin layer over the
// public C++ API (include/gradsync/). What its translation units share:
//   module.cc     the module, exceptions, the Job (init, the collectives' queue, Ctrl-C), the
//                 elastic session (rounds of Jobs)
//   collectives.cc the collectives on the Job's queue, on the whole job or a group of its ranks
//   optimizer.cc  DistributedOptimizer over a Python model and torch.optim optimizer
//   averager.cc   GradientAverager behind gs.ddp_comm_hook, on a thread of its own
//
// GIL: every call that may block (communication, waits) releases it; code that runs on
// gradsync's or autograd's threads never touches Python objects, except where it takes the GIL
// explicitly (the optimizer's step, the DDP hook's futures).
#pragma once

#include <torch/extension.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "gradsync/context.h"
#include "gradsync/transport.h"

namespace gradsync::python {

namespace py = pybind11;

// Completion of one operation queued on the Job's thread (gs.allreduce_async and friends).
// Thread-safe.
class Handle {
 public:
  using Clock = std::chrono::steady_clock;
  Handle() : queued_(Clock::now()) {}
  // Blocks (call without the GIL) until the operation ran; rethrows its failure.
  void wait();
  bool done() const;
  // The queue's thread: when the operation starts, and its end.
  void start();
  void finish(std::exception_ptr error);
  // When it was queued, started and finished, in microseconds of the steady clock (gs's
  // timeline); the last two are 0 until then.
  std::tuple<int64_t, int64_t, int64_t> times() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  const Clock::time_point queued_;
  Clock::time_point started_{}, finished_{};
};

// One process's membership in the job, as Python sees it: the Context of gradsync::init and a
// thread that runs the program's collectives one after another, synchronous and asynchronous
// alike, so that they reach the transport in the order Python called them on every rank.
// Python holds it (gs.init); DistributedOptimizer and averagers hold it too, so the transport
// outlives them.
class Job {
 public:
  explicit Job(Context context);
  ~Job() { close(); }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int rank() const { return config_.rank; }
  int size() const { return config_.size; }
  int localRank() const { return config_.localRank; }
  int localSize() const { return config_.localSize; }
  // ConfigError once closed.
  Transport& transport();

  // Runs `operation` on the queue's thread after every operation submitted before it.
  std::shared_ptr<Handle> submit(std::function<void()> operation);
  // Fails every pending and later operation on the transport (the peers learn why): after
  // Ctrl-C, so that no rank stays blocked in a collective its peers will never join.
  void abort(const std::string& reason);
  bool aborted() const { return aborted_; }
  // Stops the queue (after what is queued), then closes the transport and the store (gs.shutdown;
  // call without the GIL: the transport waits up to 10 s for its peers' goodbyes). Idempotent.
  void close();
  // Stops the queue as close() does and hands over the Context (gs.shrink makes the survivors'
  // from it); the Job is closed after. ConfigError if it was closed already.
  Context release();

 private:
  void runQueue();
  std::unique_ptr<Context> stopQueue();  // null if closed already

  const BootstrapConfig config_;
  std::unique_ptr<Context> context_;  // null once closed
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Handle>>> queue_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  std::thread thread_;
};

// The Python exception for gradsync's error types is set from the exception in flight (the
// module's translator): gs.ConfigError (a ValueError), gs.PeerLostError, gs.TimeoutError, ...
// with the rank, peer, operation and hint as attributes.
void bindCollectives(py::module_& m);
void bindOptimizer(py::module_& m);
void bindAverager(py::module_& m);

}  // namespace gradsync::python
