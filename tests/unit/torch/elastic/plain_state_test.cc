// The training state as raw tensors (torch/elastic/plain_state.h): what one member writes,
// another member of the same model and optimizer kind reads, and its next step is then the
// writer's, bitwise, for every optimizer elastic training uses (SGD with momentum, FusedSGD, Adam,
// AdamW with amsgrad; sign descent through its archive), including parameters that have no state
// yet, into the reader's own state tensors where it has them (a prepared joiner's). And the
// in-memory commit (snapshot.h) goes back to what it took, Adam's state included.
#include "torch/elastic/plain_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "gradsync/error.h"
#include "gradsync/torch/fused_sgd.h"
#include "gradsync/torch/sign_descent.h"
#include "torch/elastic/snapshot.h"
#include "torch/models/models.h"

namespace gradsync::testing {
namespace {

using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct Trainee {
  std::shared_ptr<Model> net = makeModel("cnn");  // BatchNorm: buffers too
  std::unique_ptr<torch::optim::Optimizer> optimizer;

  Trainee(const MakeOptimizer& make, uint64_t seed) : optimizer(make(net->parameters())) {
    initializeParameters(*net, seed);
  }

  // One step on a batch of `value`; the head's bias is left out of the first (it has no state
  // until a step gives it a gradient).
  void step(float value, bool everything = true) {
    net->train();
    optimizer->zero_grad();
    net->forward(torch::full({4, 1, 28, 28}, value)).sum().backward();
    if (!everything) net->parameters().back().mutable_grad() = torch::Tensor();
    optimizer->step();
  }

  std::vector<uint8_t> write() {
    StateWriter out;
    EXPECT_TRUE(writeTrainingState(out, *net, *optimizer).empty()) << "no copies to keep";
    return out.take();
  }
  void read(const std::vector<uint8_t>& bytes) {
    StateReader in(bytes, "the test's state");
    readTrainingState(in, *net, *optimizer);
    in.expectEnd();
  }
  // `from`'s state into this one's tensors as an elastic joiner takes it: a gatherer's bytes
  // read by a scatterer, then each tensor's bytes copied from where they lie to where they go.
  void readInPlace(Trainee& from) {
    StateWriter gatherer = StateWriter::gatherer();
    EXPECT_TRUE(writeTrainingState(gatherer, *from.net, *from.optimizer).empty());
    StateReader in = StateReader::scatterer(gatherer.bytes(), "the test's state");
    readTrainingState(in, *net, *optimizer);
    in.expectEnd();
    ASSERT_EQ(in.destinations().size(), gatherer.segments().size());
    for (size_t i = 0; i < gatherer.segments().size(); ++i) {
      ASSERT_EQ(in.destinations()[i].size(), gatherer.segments()[i].size());
      std::copy(gatherer.segments()[i].begin(), gatherer.segments()[i].end(),
                in.destinations()[i].begin());
    }
  }
};

void expectSameModel(Trainee& a, Trainee& b, const std::string& name) {
  const std::vector<torch::Tensor> x = modelTensors(*a.net);
  const std::vector<torch::Tensor> y = modelTensors(*b.net);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(torch::equal(x[i], y[i])) << name << " " << i;
}

const std::vector<std::pair<std::string, MakeOptimizer>>& optimizers() {
  static const std::vector<std::pair<std::string, MakeOptimizer>> all = {
      {"sgd",
       [](auto p) {
         return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
       }},
      {"fused sgd",
       [](auto p) {
         return std::make_unique<FusedSGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
       }},
      {"adam",
       [](auto p) {
         return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3));
       }},
      {"adamw amsgrad",
       [](auto p) {
         return std::make_unique<torch::optim::AdamW>(
             p, torch::optim::AdamWOptions(1e-3).amsgrad(true));
       }},
      {"sign descent",
       [](auto p) { return std::make_unique<SignDescent>(p, SignDescentOptions(1e-3)); }}};
  return all;
}

TEST(PlainState, AnotherMemberContinuesBitwise) {
  for (const auto& [name, make] : optimizers()) {
    Trainee writer(make, 1);
    writer.step(0.1f, false);
    writer.step(0.2f);
    writer.optimizer->param_groups()[0].options().set_lr(0.05);  // a schedule's rate travels
    Trainee reader(make, 2);                                     // another initialisation, no state
    reader.read(writer.write());
    expectSameModel(writer, reader, name);
    Trainee joiner(make, 3);  // the same, in place
    joiner.readInPlace(writer);
    expectSameModel(writer, joiner, name + " in place");
    writer.step(0.3f);
    reader.step(0.3f);
    joiner.step(0.3f);
    expectSameModel(writer, reader, name + " after a step");
    expectSameModel(writer, joiner, name + " in place, after a step");
  }
}

// A parameter without state yet stays without: its first step is the optimizer's first (Adam's
// bias correction from step 1), not a step of a zero state.
TEST(PlainState, AParameterWithoutStateStaysWithout) {
  const MakeOptimizer& adam = optimizers()[2].second;
  Trainee writer(adam, 1);
  writer.step(0.1f, false);
  EXPECT_TRUE(plainStateOf(*writer.optimizer).tensors.back().empty());
  Trainee reader(adam, 2);
  reader.step(0.5f);  // the reader has state everywhere: reading drops the head bias's
  reader.read(writer.write());
  EXPECT_TRUE(plainStateOf(*reader.optimizer).tensors.back().empty());
  Trainee joiner(adam, 3);
  prepareOptimizerState(*joiner.optimizer);  // so does a prepared joiner's
  joiner.readInPlace(writer);
  EXPECT_TRUE(plainStateOf(*joiner.optimizer).tensors.back().empty());
  writer.step(0.3f);
  reader.step(0.3f);
  joiner.step(0.3f);
  expectSameModel(writer, reader, "adam");
  expectSameModel(writer, joiner, "adam, prepared joiner");
}

// The optimizer's own state tensors, in parameter order (undefined slots left out).
std::vector<const void*> statePlaces(torch::optim::Optimizer& optimizer) {
  std::vector<const void*> places;
  for (const std::vector<torch::Tensor>& tensors : plainStateOf(optimizer).tensors) {
    for (const torch::Tensor& t : tensors) {
      if (t.defined()) places.push_back(t.data_ptr());
    }
  }
  return places;
}

// A prepared Adam (a joiner's, prepareOptimizerState) steps as a fresh one: its zeros and step 0
// are what Adam's first step makes. Other optimizers are left without state.
TEST(PlainState, APreparedOptimizerStepsAsAFreshOne) {
  for (const auto& [name, make] : optimizers()) {
    Trainee fresh(make, 1);
    Trainee prepared(make, 1);
    prepareOptimizerState(*prepared.optimizer);
    const bool adam = name.starts_with("adam");
    if (hasPlainState(*prepared.optimizer)) {
      const PlainOptimizerState state = plainStateOf(*prepared.optimizer);
      for (const std::vector<torch::Tensor>& tensors : state.tensors) {
        EXPECT_EQ(tensors.size(), adam ? 3u : 0u) << name;
      }
      if (adam) EXPECT_EQ(state.tensors[0][2].defined(), name == "adamw amsgrad");
    }
    fresh.step(0.1f);
    prepared.step(0.1f);
    fresh.step(0.2f);
    prepared.step(0.2f);
    expectSameModel(fresh, prepared, name);
  }
}

// Reading writes the state into the optimizer's own tensors where they have the shape (a
// survivor's, a prepared joiner's: warm pages), whole or in place, and the next step is still the
// writer's.
TEST(PlainState, ReadingFillsTheOptimizersOwnStateTensors) {
  for (const auto& [name, make] : optimizers()) {
    if (name == "sign descent") continue;  // its archive makes its own
    Trainee writer(make, 1);
    writer.step(0.1f);
    writer.step(0.2f);
    Trainee survivor(make, 2);
    survivor.step(0.5f);
    const std::vector<const void*> own = statePlaces(*survivor.optimizer);
    survivor.read(writer.write());
    EXPECT_EQ(statePlaces(*survivor.optimizer), own) << name;
    Trainee joiner(make, 3);
    prepareOptimizerState(*joiner.optimizer);
    const std::vector<const void*> prepared = statePlaces(*joiner.optimizer);
    joiner.readInPlace(writer);
    if (name.starts_with("adam")) EXPECT_EQ(statePlaces(*joiner.optimizer), prepared) << name;
    writer.step(0.3f);
    survivor.step(0.3f);
    joiner.step(0.3f);
    expectSameModel(writer, survivor, name + " survivor");
    expectSameModel(writer, joiner, name + " prepared joiner");
  }
}

TEST(PlainState, AnotherModelIsRefused) {
  const MakeOptimizer& sgd = optimizers()[0].second;
  Trainee writer(sgd, 1);
  const std::vector<uint8_t> bytes = writer.write();
  auto mlp = makeModel("mlp");
  torch::optim::SGD optimizer(mlp->parameters(), torch::optim::SGDOptions(0.1));
  StateReader in(bytes, "the cnn's state");
  EXPECT_THROW(readTrainingState(in, *mlp, optimizer), DataError);
}

TEST(StateSnapshot, GoesBackToWhatItTookWithAdamsState) {
  const MakeOptimizer& adam = optimizers()[2].second;
  Trainee trained(adam, 1);
  trained.step(0.1f);
  StateSnapshot snapshot;
  snapshot.take(*trained.net, *trained.optimizer);
  Trainee twin(adam, 1);
  twin.step(0.1f);
  trained.step(0.7f);  // a step the commit does not have
  snapshot.restore(*trained.net, *trained.optimizer);
  expectSameModel(trained, twin, "restored");
  trained.step(0.3f);
  twin.step(0.3f);
  expectSameModel(trained, twin, "a step after the restore");
}

}  // namespace
}  // namespace gradsync::testing
