#include "sim/model_parallel_waves.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <tuple>

#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

using Kind = WaveOperation::Kind;

void validate(const ModelParallelWaveOptions& o) {
  if (o.partitions.empty()) throw ConfigError("model-parallel waves: no partitions");
  if (o.waves < 1)
    throw ConfigError(fmt::format("model-parallel waves: {} waves (at least 1)", o.waves));
  if (o.steps < 1)
    throw ConfigError(fmt::format("model-parallel waves: {} steps (at least 1)", o.steps));
  if (o.hopSeconds < 0) throw ConfigError("model-parallel waves: a negative hop time");
  for (const PipelineStageCosts& c : o.partitions)
    if (c.forwardSeconds < 0 || c.backwardSeconds < 0 || c.updateSeconds < 0)
      throw ConfigError("model-parallel waves: a negative partition cost");
}

struct Node {
  WaveOperation op;
  double duration = 0;
  double ready = 0;  // the latest end among its inputs
  int pending = 0;   // inputs not yet scheduled
  std::vector<int> next;
};

// The operations of every wave and iteration, and what each waits for.
class WaveGraph {
 public:
  explicit WaveGraph(const ModelParallelWaveOptions& o)
      : o_(o), k_(static_cast<int>(o.partitions.size())) {
    for (int w = 0; w < o.waves; ++w) {
      std::vector<int> previousUpdates;
      for (int64_t n = 0; n < o.steps; ++n) previousUpdates = addIteration(w, n, previousUpdates);
    }
  }
  std::vector<Node>& nodes() { return nodes_; }

 private:
  int add(Kind kind, int resource, int wave, int64_t iteration, int partition, double duration) {
    Node node;
    node.op = {.kind = kind,
               .resource = resource,
               .wave = wave,
               .iteration = iteration,
               .partition = partition};
    node.duration = duration;
    nodes_.push_back(std::move(node));
    return static_cast<int>(nodes_.size()) - 1;
  }
  void edge(int from, int to) {
    nodes_[from].next.push_back(to);
    ++nodes_[to].pending;
  }
  // `from` → `to`, through a hop when their devices differ and hops cost anything.
  void transfer(int from, int to, int wave, int64_t n, int partition) {
    const int a = nodes_[from].op.resource, b = nodes_[to].op.resource;
    if (a == b || o_.hopSeconds == 0) return edge(from, to);
    const int link = o_.sharedLink ? k_ : k_ + a * k_ + b;
    const int hop = add(Kind::kHop, link, wave, n, partition, o_.hopSeconds);
    edge(from, hop);
    edge(hop, to);
  }
  // Returns the iteration's updates, one per partition, which the next iteration's forwards wait
  // for.
  std::vector<int> addIteration(int w, int64_t n, const std::vector<int>& previousUpdates) {
    std::vector<int> forward(k_), backward(k_), update(k_);
    for (int i = 0; i < k_; ++i) {
      const int device = deviceOf(o_.placement, k_, w, i);
      forward[i] = add(Kind::kForward, device, w, n, i, o_.partitions[i].forwardSeconds);
      if (i > 0) transfer(forward[i - 1], forward[i], w, n, i - 1);
      if (!previousUpdates.empty()) edge(previousUpdates[i], forward[i]);
    }
    for (int i = k_ - 1; i >= 0; --i) {
      const int device = deviceOf(o_.placement, k_, w, i);
      backward[i] = add(Kind::kBackward, device, w, n, i, o_.partitions[i].backwardSeconds);
      if (i == k_ - 1) edge(forward[i], backward[i]);
      if (i < k_ - 1) transfer(backward[i + 1], backward[i], w, n, i + 1);
      update[i] = add(Kind::kUpdate, device, w, n, i, o_.partitions[i].updateSeconds);
      edge(backward[i], update[i]);
    }
    return update;
  }

  const ModelParallelWaveOptions& o_;
  const int k_;
  std::vector<Node> nodes_;
};

// Each resource takes its operations in the order they became ready (ties: lower wave, then
// earlier created). Taking the globally earliest-ready operation next is exact: anything that
// becomes ready later depends on an operation that ends no earlier than this one was ready.
void schedule(std::vector<Node>& nodes, std::vector<double>& freeAt,
              std::vector<WaveOperation>& order) {
  using Entry = std::tuple<double, int, int>;  // ready, wave, node
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
    if (nodes[i].pending == 0) ready.emplace(0.0, nodes[i].op.wave, i);
  while (!ready.empty()) {
    const int i = std::get<2>(ready.top());
    ready.pop();
    Node& node = nodes[i];
    double& free = freeAt[node.op.resource];
    node.op.start = std::max(node.ready, free);
    node.op.end = free = node.op.start + node.duration;
    order.push_back(node.op);
    for (int j : node.next) {
      nodes[j].ready = std::max(nodes[j].ready, node.op.end);
      if (--nodes[j].pending == 0) ready.emplace(nodes[j].ready, nodes[j].op.wave, j);
    }
  }
}

}  // namespace

int deviceOf(WavePlacement placement, int devices, int wave, int partition) {
  return waveDevice(placement, devices, wave, partition);
}

ModelParallelWaveResult simulateModelParallelWaves(const ModelParallelWaveOptions& o) {
  validate(o);
  const int k = static_cast<int>(o.partitions.size());
  WaveGraph graph(o);
  std::vector<double> freeAt(k + 1 + k * k, 0.0);  // devices, the shared link, the pairs' links
  ModelParallelWaveResult r;
  schedule(graph.nodes(), freeAt, r.operations);
  r.busySeconds.assign(k, 0.0);
  std::vector<double> firstWaveEnds(o.steps, 0.0);  // when wave 0's iteration n ended
  for (const WaveOperation& op : r.operations) {
    r.makespanSeconds = std::max(r.makespanSeconds, op.end);
    if (op.wave == 0) firstWaveEnds[op.iteration] = std::max(firstWaveEnds[op.iteration], op.end);
    if (op.kind != Kind::kHop) r.busySeconds[op.resource] += op.end - op.start;
  }
  // The steady state away from both ends of the run (fill and drain).
  const int64_t margin = (o.steps - 1) / 4;
  const int64_t first = margin, last = o.steps - 1 - margin;
  r.secondsPerIteration = last > first ? (firstWaveEnds[last] - firstWaveEnds[first]) /
                                             static_cast<double>(last - first)
                                       : r.makespanSeconds;
  r.secondsPerMiniBatch = r.secondsPerIteration / o.waves;
  double busy = 0;
  for (double b : r.busySeconds) busy += b;
  if (r.makespanSeconds > 0) r.utilisation = busy / (k * r.makespanSeconds);
  return r;
}

}  // namespace gradsync::sim
