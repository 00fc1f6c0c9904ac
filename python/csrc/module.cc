// gradsync._C: the module, gradsync's exceptions as Python's, the Job (gs.init) with its
// collectives' queue, the elastic session whose rounds give Jobs, and the Ctrl-C watch
// (binding.h). The collectives: collectives.cc.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "binding.h"
#include "gradsync/allocator.h"
#include "gradsync/elastic.h"
#include "gradsync/error.h"

namespace gradsync::python {
namespace {

// The Python classes of gradsync's errors (python/gradsync/torch/_errors.py registers them at
// import), by name. Leaked on purpose: they must outlive every translation, even at exit.
py::dict& errorClasses() {
  static auto* classes = new py::dict();
  return *classes;
}

void raise(const char* name, const Error& e) {
  // A Ctrl-C behind this error (the watch aborted the transport): KeyboardInterrupt, as Python
  // would raise it, rather than the lost connection it caused.
  if (PyErr_CheckSignals() != 0) return;
  py::dict& classes = errorClasses();
  if (!classes.contains(name)) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return;
  }
  py::object error = classes[name](e.what());
  const ErrorContext& c = e.context();
  error.attr("rank") = c.rank >= 0 ? py::object(py::int_(c.rank)) : py::object(py::none());
  error.attr("peer") = c.peer >= 0 ? py::object(py::int_(c.peer)) : py::object(py::none());
  const int origin = failureOrigin(e);
  error.attr("origin") = origin >= 0 ? py::object(py::int_(origin)) : py::object(py::none());
  error.attr("operation") = c.operation;
  error.attr("hint") = c.hint;
  error.attr("detail") = e.detail();
  PyErr_SetObject(classes[name].ptr(), error.ptr());
}

void translate(std::exception_ptr pending) {
  try {
    std::rethrow_exception(pending);
  } catch (const ConfigError& e) {
    raise("ConfigError", e);
  } catch (const PeerLostError& e) {
    raise("PeerLostError", e);
  } catch (const StateLostError& e) {
    raise("StateLostError", e);
  } catch (const TimeoutError& e) {
    raise("TimeoutError", e);
  } catch (const ProtocolError& e) {
    raise("ProtocolError", e);
  } catch (const DataError& e) {
    raise("DataError", e);
  } catch (const SystemError& e) {
    raise("SystemCallError", e);
  } catch (const InternalError& e) {
    raise("InternalError", e);
  } catch (const Error& e) {
    raise("GradsyncError", e);
  }
}

// --- Ctrl-C: Python's own SIGINT handler only sets a flag that the interpreter checks between
// bytecodes, which a rank blocked in a collective (GIL released) never reaches; and its peers,
// waiting for it, would not either until their timeout. The watch chains a handler in front of
// Python's that wakes a thread, which aborts the job's transport: every blocked call on every
// rank returns at once (the peers with PeerLostError naming this rank, this rank with
// KeyboardInterrupt). Process-wide, as signals are.
int gWakeFd[2] = {-1, -1};
struct sigaction gPythonHandler {};
std::mutex gWatchMutex;
std::weak_ptr<Job> gWatched;

void onInterrupt(int signal) {
  const char byte = static_cast<char>(signal);
  (void)!::write(gWakeFd[1], &byte, 1);
  if (gPythonHandler.sa_handler != SIG_DFL && gPythonHandler.sa_handler != SIG_IGN) {
    gPythonHandler.sa_handler(signal);
  }
}

void watchInterrupts() {
  for (;;) {
    char byte = 0;
    if (::read(gWakeFd[0], &byte, 1) != 1) {
      if (errno == EINTR) continue;
      return;
    }
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(gWatchMutex);
      job = gWatched.lock();
    }
    if (job) job->abort(fmt::format("rank {} was interrupted (SIGINT)", job->rank()));
  }
}

// Installs the chained handler once (Python's handler stays behind it), and watches `job`.
void watchJob(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(gWatchMutex);
    gWatched = job;
  }
  static std::once_flag installed;
  std::call_once(installed, [] {
    if (::pipe2(gWakeFd, O_CLOEXEC) != 0) return;
    std::thread(watchInterrupts).detach();
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &gPythonHandler);
  });
}

InitOptions initOptions(std::optional<int> rank, std::optional<int> size,
                        std::optional<std::string> masterAddr, std::optional<int> masterPort,
                        std::optional<std::string> timeout, std::optional<std::string> jobToken,
                        bool tls, double bandwidth) {
  InitOptions options;
  options.bootstrap.rank = rank;
  options.bootstrap.worldSize = size;
  options.bootstrap.masterAddr = std::move(masterAddr);
  options.bootstrap.masterPort = masterPort;
  options.bootstrap.timeout = std::move(timeout);
  options.bootstrap.jobToken = std::move(jobToken);
  options.bootstrap.tls = tls;
  options.link.bandwidthBytesPerSec = bandwidth;
  return options;
}

std::shared_ptr<Job> init(std::optional<int> rank, std::optional<int> size,
                          std::optional<std::string> masterAddr, std::optional<int> masterPort,
                          std::optional<std::string> timeout, std::optional<std::string> jobToken,
                          bool tls, double bandwidth, bool watchCtrlC, bool keepFreedMemory) {
  if (keepFreedMemory) keepFreedMemoryInHeap();  // as `gradsync train` does
  InitOptions options =
      initOptions(rank, size, masterAddr, masterPort, timeout, jobToken, tls, bandwidth);
  std::shared_ptr<Job> job;
  {
    py::gil_scoped_release noGil;
    job = std::make_shared<Job>(gradsync::init(options));
  }
  if (watchCtrlC) watchJob(job);
  return job;
}

// gs.init in an elastic job (python/gradsync/torch/elastic.py): the session, whose rounds give
// the Jobs.
std::shared_ptr<ElasticSession> elasticSession(
    std::string range, std::optional<int> rank, std::optional<int> size,
    std::optional<std::string> masterAddr, std::optional<int> masterPort,
    std::optional<std::string> timeout, std::optional<std::string> jobToken, bool tls,
    double bandwidth, bool keepFreedMemory, std::optional<double> hangTimeoutSeconds) {
  if (keepFreedMemory) keepFreedMemoryInHeap();
  ElasticSessionOptions options{
      .range = std::move(range),
      .init = initOptions(rank, size, masterAddr, masterPort, timeout, jobToken, tls, bandwidth)};
  if (hangTimeoutSeconds) {
    options.hangTimeout =
        std::chrono::milliseconds(static_cast<int64_t>(1000 * *hangTimeoutSeconds));
  }
  py::gil_scoped_release noGil;
  return std::make_shared<ElasticSession>(options);
}

// The Job of the session's next round; None when the job finished before this worker got in.
std::shared_ptr<Job> joinNextRound(ElasticSession& session, int64_t progress, bool watchCtrlC) {
  std::optional<Context> context;
  {
    py::gil_scoped_release noGil;
    context = session.joinNextRound(progress);
  }
  if (!context) return nullptr;
  auto job = std::make_shared<Job>(std::move(*context));
  if (watchCtrlC) watchJob(job);
  return job;
}

// gs.shrink: the survivors' Job (gradsync::shrink) made from `job`'s Context; `job` is closed.
std::shared_ptr<Job> shrinkJob(Job& job, double windowSeconds, int minSize, bool watchCtrlC) {
  std::optional<Context> shrunk;
  {
    py::gil_scoped_release noGil;
    const ShrinkOptions options{
        .window = std::chrono::milliseconds(static_cast<int64_t>(windowSeconds * 1000)),
        .minSize = minSize};
    shrunk = shrink(job.release(), options);
  }
  auto result = std::make_shared<Job>(std::move(*shrunk));
  if (watchCtrlC) watchJob(result);
  return result;
}

}  // namespace

void Handle::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Handle::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Handle::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  started_ = Clock::now();
}

std::tuple<int64_t, int64_t, int64_t> Handle::times() const {
  auto us = [](Clock::time_point t) {
    if (t == Clock::time_point{}) return int64_t{0};
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  };
  std::lock_guard<std::mutex> lock(mutex_);
  return {us(queued_), us(started_), us(finished_)};
}

void Handle::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = Clock::now();
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

Job::Job(Context context)
    : config_(context.config()),
      context_(std::make_unique<Context>(std::move(context))),
      thread_([this] { runQueue(); }) {}

std::unique_ptr<Context> Job::stopQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return nullptr;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);  // abort() may run on the Ctrl-C watch's thread
  return std::move(context_);
}

void Job::close() {
  stopQueue().reset();
}

Context Job::release() {
  std::unique_ptr<Context> context = stopQueue();
  if (!context) {
    throw ConfigError("gradsync was shut down", {.rank = rank(), .hint = "call gs.init() first"});
  }
  return std::move(*context);
}

Transport& Job::transport() {
  if (!context_) {
    throw ConfigError("gradsync was shut down", {.rank = rank(), .hint = "call gs.init() first"});
  }
  return context_->transport();
}

std::shared_ptr<Handle> Job::submit(std::function<void()> operation) {
  auto handle = std::make_shared<Handle>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      throw ConfigError("gradsync was shut down", {.rank = rank(), .hint = "call gs.init() first"});
    }
    queue_.emplace_back(std::move(operation), handle);
  }
  cv_.notify_all();
  return handle;
}

void Job::runQueue() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [operation, handle] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    handle->start();
    try {
      operation();
    } catch (...) {
      error = std::current_exception();
    }
    operation = nullptr;  // its tensors go before the handle says done
    handle->finish(error);
    lock.lock();
  }
}

void Job::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!context_ || aborted_.exchange(true)) return;
  context_->transport().abort(
      std::make_exception_ptr(PeerLostError(reason, {.rank = rank(), .operation = "interrupt"})));
}

}  // namespace gradsync::python

namespace py = pybind11;
using namespace gradsync::python;
using gradsync::ElasticSession;

PYBIND11_MODULE(_C, m) {
  m.doc() = "gradsync's C++ core for gradsync.torch (import gradsync.torch as gs)";
  py::register_exception_translator(&translate);
  m.def("_register_errors", [](py::dict classes) {
    for (auto item : classes) errorClasses()[item.first] = item.second;
  });

  py::class_<Handle, std::shared_ptr<Handle>>(m, "Handle")
      .def("wait", &Handle::wait, py::call_guard<py::gil_scoped_release>())
      .def("done", &Handle::done)
      .def("times", &Handle::times);

  py::class_<Job, std::shared_ptr<Job>>(m, "Job")
      .def_property_readonly("rank", &Job::rank)
      .def_property_readonly("size", &Job::size)
      .def_property_readonly("local_rank", &Job::localRank)
      .def_property_readonly("local_size", &Job::localSize)
      .def_property_readonly("aborted", &Job::aborted)
      .def("abort", &Job::abort, py::call_guard<py::gil_scoped_release>())
      .def("close", &Job::close, py::call_guard<py::gil_scoped_release>());
  m.def("init", &init, py::arg("rank"), py::arg("size"), py::arg("master_addr"),
        py::arg("master_port"), py::arg("timeout"), py::arg("job_token"), py::arg("tls"),
        py::arg("bandwidth"), py::arg("watch_ctrl_c"), py::arg("keep_freed_memory"));
  m.def("shrink", &shrinkJob, py::arg("job"), py::arg("window"), py::arg("min_size"),
        py::arg("watch_ctrl_c"));
  py::class_<ElasticSession, std::shared_ptr<ElasticSession>>(m, "ElasticSession")
      .def("join", &joinNextRound, py::arg("progress"), py::arg("watch_ctrl_c"))
      .def_property_readonly("round", &ElasticSession::round)
      .def_property_readonly("name", &ElasticSession::name)
      .def("waiting", &ElasticSession::waiting, py::call_guard<py::gil_scoped_release>())
      .def("heartbeat", &ElasticSession::heartbeat, py::call_guard<py::gil_scoped_release>())
      .def("finish", &ElasticSession::finish, py::call_guard<py::gil_scoped_release>());
  m.def("elastic_session", &elasticSession, py::arg("range"), py::arg("rank"), py::arg("size"),
        py::arg("master_addr"), py::arg("master_port"), py::arg("timeout"), py::arg("job_token"),
        py::arg("tls"), py::arg("bandwidth"), py::arg("keep_freed_memory"),
        py::arg("hang_timeout_seconds") = std::nullopt);
  bindCollectives(m);
  bindOptimizer(m);
  bindAverager(m);
}
