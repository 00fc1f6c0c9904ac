// gs.DistributedOptimizer's core: the public DistributedOptimizer over a Python model and a
// torch.optim optimizer. It needs a torch::nn::Module and a torch::optim::Optimizer; Python
// has neither, so this builds their C++ twins over the very same tensors:
//   - a module tree mirroring the model's parameter names ("features.0.weight" is parameter
//     "weight" of submodule "0" of submodule "features"), so that names, shapes, order and the
//     layer-by-layer waits of p3 and sharded are the model's;
//   - an optimizer of the same kind and options (SGD, Adam, AdamW; any other torch.optim
//     optimizer as a "foreign" one, which the update modes refuse as C++ does), whose step()
//     runs the Python optimizer's step with the GIL held.
// Autograd hooks are the C++ DistributedOptimizer's own, on the shared tensors: they fire in
// Python's backward without touching Python.
#include <fmt/format.h>

#include <optional>
#include <tuple>
#include <unordered_map>

#include "binding.h"
#include "gradsync/error.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "gradsync/trace.h"

namespace gradsync::python {
namespace {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

double number(const py::dict& options, const char* key, double fallback) {
  return options.contains(key) ? options[key].cast<double>() : fallback;
}
bool flag(const py::dict& options, const char* key) {
  return options.contains(key) && options[key].cast<bool>();
}

// The C++ optimizer `Base` whose step() is the Python optimizer's.
template <typename Base>
class PythonStepped : public Base {
 public:
  template <typename... Args>
  explicit PythonStepped(py::object python, Args&&... args)
      : Base(std::forward<Args>(args)...), python_(std::move(python)) {}
  // Destroyed with the GIL held (Synchronized::close).
  ~PythonStepped() override = default;

  torch::Tensor step(torch::optim::Optimizer::LossClosure) override {
    py::gil_scoped_acquire gil;
    python_.attr("step")();
    return {};
  }

 private:
  py::object python_;
};

// Any other torch.optim optimizer: gradient mode runs it as it is; DistributedOptimizer refuses
// it where the engine would have to apply its rule (it is none of SGD, Adam, AdamW).
class ForeignOptimizer : public torch::optim::Optimizer {
 public:
  ForeignOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, double lr)
      : Optimizer(std::move(groups), std::make_unique<torch::optim::SGDOptions>(lr)) {}
  torch::Tensor step(LossClosure) override { return {}; }
};

std::unique_ptr<torch::optim::OptimizerOptions> optionsOf(const std::string& kind,
                                                          const py::dict& o) {
  const double lr = number(o, "lr", 1e-3);
  if (kind == "sgd") {
    return std::make_unique<torch::optim::SGDOptions>(
        torch::optim::SGDOptions(lr)
            .momentum(number(o, "momentum", 0))
            .dampening(number(o, "dampening", 0))
            .weight_decay(number(o, "weight_decay", 0))
            .nesterov(flag(o, "nesterov")));
  }
  auto betas = o.contains("betas") ? o["betas"].cast<std::pair<double, double>>()
                                   : std::pair<double, double>{0.9, 0.999};
  if (kind == "adam") {
    return std::make_unique<torch::optim::AdamOptions>(
        torch::optim::AdamOptions(lr)
            .betas({betas.first, betas.second})
            .eps(number(o, "eps", 1e-8))
            .weight_decay(number(o, "weight_decay", 0))
            .amsgrad(flag(o, "amsgrad")));
  }
  if (kind == "adamw") {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(lr)
            .betas({betas.first, betas.second})
            .eps(number(o, "eps", 1e-8))
            .weight_decay(number(o, "weight_decay", 1e-2))
            .amsgrad(flag(o, "amsgrad")));
  }
  return std::make_unique<torch::optim::SGDOptions>(lr);
}

// The twin of the Python optimizer (`kind`: sgd, adam, adamw or foreign) over `groups`, a list
// of (tensors, options) as its param_groups.
std::unique_ptr<torch::optim::Optimizer> twinOf(py::object python, const std::string& kind,
                                                const py::list& groups) {
  std::vector<torch::optim::OptimizerParamGroup> twinGroups;
  for (py::handle group : groups) {
    auto [params, options] = group.cast<std::pair<std::vector<torch::Tensor>, py::dict>>();
    twinGroups.emplace_back(std::move(params), optionsOf(kind, options));
  }
  const double lr = twinGroups.empty() ? 0.0 : twinGroups.front().options().get_lr();
  if (kind == "sgd") {
    return std::make_unique<PythonStepped<torch::optim::SGD>>(std::move(python), twinGroups,
                                                              torch::optim::SGDOptions(lr));
  }
  if (kind == "adam") {
    return std::make_unique<PythonStepped<torch::optim::Adam>>(std::move(python), twinGroups,
                                                               torch::optim::AdamOptions(lr));
  }
  if (kind == "adamw") {
    return std::make_unique<PythonStepped<torch::optim::AdamW>>(std::move(python), twinGroups,
                                                                torch::optim::AdamWOptions(lr));
  }
  return std::make_unique<PythonStepped<ForeignOptimizer>>(std::move(python), twinGroups, lr);
}

// The module tree of the parameters' dotted names; `layers` gets every submodule by path.
std::shared_ptr<torch::nn::Module> mirrorOf(
    const Named& named, std::unordered_map<std::string, const torch::nn::Module*>& layers) {
  auto root = std::make_shared<torch::nn::Module>();
  for (const auto& [name, tensor] : named) {
    std::shared_ptr<torch::nn::Module> at = root;
    std::string path;
    size_t begin = 0;
    try {
      for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', begin)) {
        const std::string part = name.substr(begin, dot - begin);
        path += (path.empty() ? "" : ".") + part;
        auto children = at->named_children();
        std::shared_ptr<torch::nn::Module> child =
            children.contains(part)
                ? children[part]
                : at->register_module(part, std::make_shared<torch::nn::Module>());
        layers[path] = child.get();
        at = child;
        begin = dot + 1;
      }
      at->register_parameter(name.substr(begin), tensor, tensor.requires_grad());
    } catch (const c10::Error& e) {
      throw ConfigError(fmt::format("parameter name '{}' cannot name a module's parameter: {}",
                                    name, e.what_without_backtrace()),
                        {.operation = "distributed optimizer",
                         .hint = "pass model.named_parameters(), whose names are dotted paths"});
    }
  }
  return root;
}

// What gs.DistributedOptimizer holds: the twins and the C++ DistributedOptimizer over them.
class Synchronized {
 public:
  Synchronized(std::shared_ptr<Job> job, py::object optimizer, const std::string& kind,
               const py::list& groups, const Named& named, const SyncOptions& options)
      : job_(std::move(job)), twin_(twinOf(std::move(optimizer), kind, groups)) {
    mirror_ = mirrorOf(named, layers_);
    py::gil_scoped_release noGil;
    impl_ = std::make_unique<DistributedOptimizer>(*twin_, mirror_, job_->transport(), options);
  }
  ~Synchronized() { close(); }

  DistributedOptimizer& impl() {
    if (!impl_) throw ConfigError("this DistributedOptimizer was closed (gs.shutdown)");
    return *impl_;
  }
  // The module of `path` (a submodule of the model holding parameters), for waitFor; null if
  // the model has none there.
  const torch::nn::Module* layer(const std::string& path) const {
    auto found = layers_.find(path);
    return found == layers_.end() ? nullptr : found->second;
  }
  torch::optim::Optimizer& twin() { return *twin_; }
  bool closed() const { return !impl_; }

  // Stops the engine without the GIL (it may wait for communication in flight), then drops the
  // twin, which holds the Python optimizer, with it. Idempotent.
  void close() {
    if (impl_) {
      py::gil_scoped_release noGil;
      impl_.reset();
    }
    twin_.reset();
  }
  void setTrace(const std::string& steps) {
    trace_ = std::make_unique<TraceRecorder>(job_->rank(), parseStepWindow(steps),
                                             SteadyClock::instance());
    impl().setTrace(trace_.get());
  }
  TraceRecorder* trace() { return trace_.get(); }

 private:
  std::shared_ptr<Job> job_;
  std::unique_ptr<torch::optim::Optimizer> twin_;
  std::shared_ptr<torch::nn::Module> mirror_;
  std::unordered_map<std::string, const torch::nn::Module*> layers_;
  std::unique_ptr<TraceRecorder> trace_;  // outlives impl_, which records into it
  std::unique_ptr<DistributedOptimizer> impl_;
};

// The twin's SGD momentum buffers, by parameter in param_groups order (None: no buffer).
py::list momentumBuffers(Synchronized& s) {
  py::list out;
  auto& state = s.twin().state();
  for (const auto& group : s.twin().param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      auto found = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (found == state.end()) {
        out.append(py::none());
        continue;
      }
      auto& sgd = static_cast<torch::optim::SGDParamState&>(*found->second);
      out.append(sgd.momentum_buffer().defined() ? py::cast(sgd.momentum_buffer().clone())
                                                 : py::object(py::none()));
    }
  }
  return out;
}

void setMomentumBuffers(Synchronized& s, const py::list& buffers) {
  auto& state = s.twin().state();
  state.clear();
  size_t i = 0;
  for (const auto& group : s.twin().param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      if (i >= buffers.size()) throw ConfigError("fewer momentum buffers than parameters");
      py::handle buffer = buffers[i++];
      if (buffer.is_none()) continue;
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      sgd->momentum_buffer(buffer.cast<torch::Tensor>().detach().clone().contiguous());
      state[c10::guts::to_string(p.unsafeGetTensorImpl())] = std::move(sgd);
    }
  }
}

template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> adamState(torch::Tensor expAvg,
                                                             torch::Tensor expAvgSq, int64_t step) {
  auto state = std::make_unique<State>();
  state->exp_avg(std::move(expAvg));
  state->exp_avg_sq(std::move(expAvgSq));
  state->step(step);
  return state;
}

// The twin's Adam state becomes the Python optimizer's own tensors, shared, not copied: for
// update mode's loadOptimizerState (which copies them into the engine), and for
// SyncOptions::compressMomentum (1-bit Adam) from Python, so that the momenta the hooks exchange
// past the warm-up and the update the engine applies read and write the state torch.optim
// keeps (and saves). `states`: by parameter in param_groups order, None (no state yet) or
// (exp_avg, exp_avg_sq, step).
void shareAdamState(Synchronized& s, const py::list& states) {
  torch::optim::Optimizer& twin = s.twin();
  const bool decoupled = dynamic_cast<torch::optim::AdamW*>(&twin) != nullptr;
  if (!decoupled && dynamic_cast<torch::optim::Adam*>(&twin) == nullptr) {
    throw ConfigError("Adam state for an optimizer that is not torch.optim.Adam or AdamW");
  }
  auto& state = twin.state();
  state.clear();
  size_t i = 0;
  for (const auto& group : twin.param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      if (i >= states.size()) throw ConfigError("fewer Adam states than parameters");
      py::handle entry = states[i++];
      if (entry.is_none()) continue;
      auto [m, v, step] = entry.cast<std::tuple<torch::Tensor, torch::Tensor, int64_t>>();
      state[c10::guts::to_string(p.unsafeGetTensorImpl())] =
          decoupled ? adamState<torch::optim::AdamWParamState>(m, v, step)
                    : adamState<torch::optim::AdamParamState>(m, v, step);
    }
  }
}

// The twin's Adam state, by parameter in param_groups order: None (no state) or, with `whole`,
// (exp_avg, exp_avg_sq, step) as copies (update mode's moments, which withOptimizerState put
// there), else the step count alone (after a step past 1-bit Adam's warm-up, the engine's update
// advanced it).
py::list adamStates(Synchronized& s, bool whole) {
  torch::optim::Optimizer& twin = s.twin();
  const bool decoupled = dynamic_cast<torch::optim::AdamW*>(&twin) != nullptr;
  py::list out;
  for (const auto& group : twin.param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      auto found = twin.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (found == twin.state().end()) {
        out.append(py::none());
        continue;
      }
      const auto entry = [&](const auto& adam) -> py::object {
        if (!whole) return py::cast(adam.step());
        return py::make_tuple(adam.exp_avg().clone(), adam.exp_avg_sq().clone(), adam.step());
      };
      out.append(decoupled ? entry(static_cast<torch::optim::AdamWParamState&>(*found->second))
                           : entry(static_cast<torch::optim::AdamParamState&>(*found->second)));
    }
  }
  return out;
}

// Runs a Python callable from inside a C++ call made without the GIL.
std::function<void()> withGil(py::function fn) {
  return [fn = std::move(fn)] {
    py::gil_scoped_acquire gil;
    fn();
  };
}

void bindSyncOptions(py::module_& m) {
  py::class_<SyncOptions>(m, "SyncOptions")
      .def(py::init<>())
      .def_readwrite("schedule", &SyncOptions::schedule)
      .def_readwrite("compress", &SyncOptions::compress)
      .def_readwrite("compress_overrides", &SyncOptions::compressOverrides)
      .def_readwrite("compress_min_elements", &SyncOptions::compressMinElements)
      .def_readwrite("compress_warmup", &SyncOptions::compressWarmup)
      .def_readwrite("compress_warmup_codec", &SyncOptions::compressWarmupCodec)
      .def_readwrite("guard", &SyncOptions::guard)
      .def_readwrite("compress_momentum", &SyncOptions::compressMomentum)
      .def_readwrite("sync", &SyncOptions::sync)
      .def_readwrite("parameter_servers", &SyncOptions::parameterServers)
      .def_readwrite("servers", &SyncOptions::servers)
      .def_readwrite("delay_warmup", &SyncOptions::delayWarmup)
      .def_readwrite("local_lr", &SyncOptions::localLr)
      .def_readwrite("local_momentum", &SyncOptions::localMomentum)
      .def_readwrite("glu", &SyncOptions::glu)
      .def_readwrite("cd_threshold", &SyncOptions::cdThreshold)
      .def_readwrite("compensate", &SyncOptions::compensate)
      .def_readwrite("seed", &SyncOptions::seed)
      .def_readwrite("join", &SyncOptions::join)
      .def_readwrite("backward_passes_per_step", &SyncOptions::backwardPassesPerStep);
}

using S = Synchronized;
const auto kReleased = py::call_guard<py::gil_scoped_release>();

// A step and its waits.
void bindSteps(py::class_<S>& c) {
  c.def("close", &S::close)
      .def(
          "step", [](S& s) { s.impl().step(); }, kReleased)
      .def(
          "synchronize", [](S& s) { s.impl().synchronize(); }, kReleased)
      // Waits are no-ops once closed: nothing is in flight any more (a forward after shutdown).
      .def(
          "wait_for_parameters",
          [](S& s) {
            if (!s.closed()) s.impl().waitForParameters();
          },
          kReleased)
      .def("has_layer", [](S& s, const std::string& path) { return s.layer(path) != nullptr; })
      .def(
          "wait_for_layer",
          [](S& s, const std::string& path) {
            const torch::nn::Module* layer = s.layer(path);
            if (layer != nullptr && !s.closed()) s.impl().waitFor(*layer);
          },
          kReleased)
      .def(
          "synchronize_model", [](S& s) { s.impl().synchronizeModel(); }, kReleased)
      .def("updates_parameters", [](S& s) { return s.impl().updatesParameters(); })
      .def(
          "join", [](S& s) { s.impl().join(); }, kReleased)
      .def("set_step", [](S& s, int64_t step) { s.impl().setStep(step); })
      .def("report_loss", [](S& s, double loss) { s.impl().reportLoss(loss); })
      .def("set_lrs", [](S& s, const std::vector<double>& lrs) {
        auto& groups = s.twin().param_groups();
        for (size_t g = 0; g < groups.size() && g < lrs.size(); ++g)
          groups[g].options().set_lr(lrs[g]);
      });
}

// Checkpoints: the synchronization state and the optimizer state the engine keeps.
void bindState(py::class_<S>& c) {
  c.def("sync_state",
        [](S& s) {
          std::vector<uint8_t> bytes;
          {
            py::gil_scoped_release noGil;
            bytes = s.impl().syncState();
          }
          return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        })
      .def(
          "load_sync_state",
          [](S& s, const std::string& bytes) {
            s.impl().loadSyncState({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
          },
          kReleased)
      .def(
          "adopt_sync_state",
          [](S& s, const std::string& bytes, int64_t step) {
            s.impl().adoptSyncState({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                    step);
          },
          kReleased)
      .def("with_optimizer_state",
           [](S& s, py::function fn) {
             auto run = withGil(std::move(fn));
             py::gil_scoped_release noGil;
             s.impl().withOptimizerState(run);
           })
      .def(
          "load_optimizer_state", [](S& s) { s.impl().loadOptimizerState(); }, kReleased)
      .def("with_global_model",
           [](S& s, py::function fn) {
             auto run = withGil(std::move(fn));
             py::gil_scoped_release noGil;
             s.impl().withGlobalModel(run);
           })
      .def("momentum_buffers", &momentumBuffers)
      .def("set_momentum_buffers", &setMomentumBuffers)
      .def("exchanges_momenta", [](S& s) { return s.impl().exchangesMomenta(); })
      .def("share_adam_state", &shareAdamState)
      .def("adam_steps", [](S& s) { return adamStates(s, false); })
      .def("adam_states", [](S& s) { return adamStates(s, true); });
}

// Statistics and the trace.
void bindTrace(py::class_<S>& c) {
  c.def("stats",
        [](S& s) {
          SyncStats t = s.impl().stats();
          py::dict d;
          d["bytes_sent"] = t.bytesSent;
          d["dense_bytes"] = t.denseBytes;
          d["comm_seconds"] = t.commSeconds;
          d["encode_seconds"] = t.encodeSeconds;
          d["decode_seconds"] = t.decodeSeconds;
          d["wait_seconds"] = t.waitSeconds;
          d["async_pushes"] = t.asyncPushes;
          d["staleness_sum"] = t.stalenessSum;
          d["staleness_max"] = t.stalenessMax;
          return d;
        })
      .def("set_trace", &S::setTrace)
      .def("trace_step",
           [](S& s, int64_t step) {
             if (s.trace()) s.trace()->setStep(step);
           })
      .def("trace_json", [](S& s) {
        if (!s.trace()) return std::string("[]");
        s.trace()->endStep();
        return s.trace()->serialize();
      });
}

// A separate parameter server's life (SyncOptions::servers).
void serve(std::shared_ptr<Job> job, py::object optimizer, const std::string& kind,
           const py::list& groups, const Named& named, const SyncOptions& options) {
  std::unique_ptr<torch::optim::Optimizer> twin = twinOf(std::move(optimizer), kind, groups);
  std::unordered_map<std::string, const torch::nn::Module*> layers;
  std::shared_ptr<torch::nn::Module> mirror = mirrorOf(named, layers);
  py::gil_scoped_release noGil;
  DistributedOptimizer::serve(*twin, *mirror, job->transport(), options);
}

}  // namespace

void bindOptimizer(py::module_& m) {
  bindSyncOptions(m);
  py::class_<S> c(m, "DistributedOptimizer");
  c.def(py::init<std::shared_ptr<Job>, py::object, const std::string&, const py::list&,
                 const Named&, const SyncOptions&>());
  bindSteps(c);
  bindState(c);
  bindTrace(c);
  m.def("serve", &serve);
  m.def("is_server", &DistributedOptimizer::isServer);
}

}  // namespace gradsync::python
