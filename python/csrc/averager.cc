// gs.ddp_comm_hook's core: a GradientAverager (gradsync/gradient_averager.h) on a thread of its
// own. DDP calls the hook once per gradient bucket as backward fills it, in bucket order on
// every rank, and waits for the returned futures only at the end of backward: queuing each
// bucket here and completing its torch.futures.Future from this thread lets communication
// overlap the rest of backward, as DDP's own allreduce does.
#include <fmt/format.h>

#include "binding.h"
#include "gradsync/error.h"
#include "gradsync/gradient_averager.h"

namespace gradsync::python {
namespace {

class HookAverager {
 public:
  HookAverager(std::shared_ptr<Job> job, std::vector<GradientShape> shapes, AveragerOptions options)
      : job_(std::move(job)),
        averager_(job_->transport(), std::move(shapes), std::move(options)),
        thread_([this] { run(); }) {}

  ~HookAverager() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    py::gil_scoped_release noGil;  // the thread may need the GIL to finish a future
    thread_.join();
  }

  // Queues the average of `bucket` (the tensors `indices`, back to back); `future` gets the
  // bucket as its result, or the error. Called with the GIL (the hook is Python).
  void submit(std::vector<int> indices, torch::Tensor bucket, uint64_t step, py::object future) {
    if (bucket.scalar_type() != torch::kFloat || !bucket.is_contiguous() ||
        !bucket.device().is_cpu()) {
      throw ConfigError(fmt::format("a DDP bucket of {} on {}", toString(bucket.scalar_type()),
                                    bucket.device().str()),
                        {.rank = job_->rank(),
                         .operation = "ddp_comm_hook",
                         .hint = "gradsync averages float32 gradients on the CPU"});
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({std::move(indices), std::move(bucket), step,
                        std::make_unique<py::object>(std::move(future))});
    }
    cv_.notify_all();
  }

  // Blocks (without the GIL) until every queued bucket is done: before reading the state.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }
  GradientAverager& averager() { return averager_; }

 private:
  struct Bucket {
    std::vector<int> indices;
    torch::Tensor data;
    uint64_t step;
    std::unique_ptr<py::object> future;  // created and destroyed with the GIL
  };

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Bucket bucket = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        averager_.average(bucket.indices,
                          {bucket.data.data_ptr<float>(), static_cast<size_t>(bucket.data.numel())},
                          bucket.step);
      } catch (...) {
        error = std::current_exception();
      }
      complete(bucket, error);
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }

  // Sets the future's result (or exception) with the GIL, and drops it there.
  void complete(Bucket& bucket, std::exception_ptr error) {
    py::gil_scoped_acquire gil;
    py::object& future = *bucket.future;
    if (!error) {
      future.attr("set_result")(bucket.data);
    } else {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        future.attr("set_exception")(py::reinterpret_steal<py::object>(
            PyObject_CallFunction(PyExc_RuntimeError, "s", e.what())));
      }
    }
    bucket.future.reset();
  }

  std::shared_ptr<Job> job_;
  GradientAverager averager_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Bucket> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

void bindAverager(py::module_& m) {
  py::class_<HookAverager>(m, "HookAverager")
      .def(py::init([](std::shared_ptr<Job> job,
                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                       const std::string& compress, const std::vector<std::string>& overrides,
                       size_t minElements, int64_t warmup, uint64_t seed, double momentum) {
             std::vector<GradientShape> shapes;
             for (const auto& [name, dims] : tensors) shapes.push_back({name, dims});
             return std::make_unique<HookAverager>(
                 std::move(job), std::move(shapes),
                 AveragerOptions{.compress = compress,
                                 .compressOverrides = overrides,
                                 .compressMinElements = minElements,
                                 .compressWarmup = warmup,
                                 .seed = seed,
                                 .momentum = momentum});
           }),
           py::arg("job"), py::arg("tensors"), py::arg("compress"), py::arg("overrides"),
           py::arg("min_elements"), py::arg("warmup"), py::arg("seed"), py::arg("momentum"))
      .def("submit", &HookAverager::submit)
      .def("drain", &HookAverager::drain, py::call_guard<py::gil_scoped_release>())
      .def("method", [](HookAverager& h, int index) { return h.averager().method(index); })
      .def("stats",
           [](HookAverager& h) {
             AveragerStats s = h.averager().stats();
             py::dict d;
             d["bytes_sent"] = s.bytesSent;
             d["dense_bytes"] = s.denseBytes;
             d["comm_seconds"] = s.commSeconds;
             d["encode_seconds"] = s.encodeSeconds;
             d["decode_seconds"] = s.decodeSeconds;
             return d;
           })
      .def("save_state",
           [](HookAverager& h) {
             std::vector<uint8_t> bytes = h.averager().saveState();
             return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           })
      .def("load_state", [](HookAverager& h, const std::string& bytes) {
        h.averager().loadState({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
      });
}

}  // namespace gradsync::python
