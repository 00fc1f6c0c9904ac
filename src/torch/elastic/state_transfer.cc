#include "torch/elastic/state_transfer.h"

#include <span>

#include "common/allocator.h"
#include "common/tags.h"
#include "gradsync/error.h"
#include "torch/elastic/plain_state.h"

namespace gradsync {
namespace {

constexpr uint8_t kReady = 1;
constexpr const char* kWhat = "the elastic state of rank 0";

// What shareState moves besides the progress: the synchronization state, then the training
// state. A member "holds" rank 0's state when these bytes would be rank 0's. Returns the copies
// a gatherer's segments may point into (writeTrainingState).
std::vector<torch::Tensor> writeHeldState(StateWriter& out, Model& net,
                                          torch::optim::Optimizer& optimizer,
                                          const std::vector<uint8_t>* sync) {
  if (sync != nullptr) out.write(*sync);
  return writeTrainingState(out, net, optimizer);
}

// What writeHeldState wrote, from `in`, into the member's own (the tensors in place; `sync` only
// once the whole was read, as the caller may still need its own).
void readHeldState(StateReader& in, Model& net, torch::optim::Optimizer& optimizer,
                   std::vector<uint8_t>& syncBytes, const std::vector<uint8_t>* sync) {
  if (sync != nullptr) in.read(syncBytes);
  readTrainingState(in, net, optimizer);
  in.expectEnd();
}

// Posts `receives`, tells rank 0 the member is ready, and waits for every byte.
void receiveWhenReady(Transport& transport, const std::vector<std::span<uint8_t>>& places) {
  std::vector<WorkPtr> receives;
  try {
    for (const std::span<uint8_t>& place : places) {
      receives.push_back(transport.recv(0, tags::kElasticState, place.data(), place.size()));
    }
    transport.send(0, tags::kElasticState, &kReady, sizeof kReady)->wait();
    for (const WorkPtr& work : receives) work->wait();
  } catch (...) {
    abandonTransfers(transport, receives, std::current_exception());
    throw;
  }
}

// Whole: into one buffer, touched (advised to huge pages: src/common/allocator.h) before the
// receive is posted, so that the bytes land in memory already faulted in; loaded once all came.
void receiveWhole(Transport& transport, uint64_t size, Model& net,
                  torch::optim::Optimizer& optimizer, std::vector<uint8_t>* sync) {
  std::vector<uint8_t> bytes;
  bytes.reserve(size);
  adviseHugePages(bytes.data(), bytes.capacity());
  bytes.resize(size);
  receiveWhenReady(transport, {std::span<uint8_t>(bytes)});
  StateReader reader(bytes, kWhat);
  std::vector<uint8_t> syncBytes;
  readHeldState(reader, net, optimizer, syncBytes, sync);
  if (sync != nullptr) *sync = std::move(syncBytes);
}

// In place: the gatherer's `size` bytes, read by a scatterer into the member's model and
// optimizer, then each tensor's bytes where it belongs.
void receiveInPlace(Transport& transport, uint64_t size, Model& net,
                    torch::optim::Optimizer& optimizer, std::vector<uint8_t>* sync) {
  std::vector<uint8_t> gathered(size);
  transport.recv(0, tags::kElasticState, gathered.data(), size)->wait();
  StateReader reader = StateReader::scatterer(gathered, kWhat);
  std::vector<uint8_t> syncBytes;
  readHeldState(reader, net, optimizer, syncBytes, sync);
  receiveWhenReady(transport, reader.destinations());
  if (sync != nullptr) *sync = std::move(syncBytes);
}

}  // namespace

StateWriter hashHeldState(Model& net, torch::optim::Optimizer& optimizer,
                          const std::vector<uint8_t>* sync) {
  StateWriter hasher = StateWriter::hasher();
  (void)writeHeldState(hasher, net, optimizer, sync);
  return hasher;
}

HeldStateSource::HeldStateSource(Model& net, torch::optim::Optimizer& optimizer,
                                 const std::vector<uint8_t>* sync)
    : net_(net), optimizer_(optimizer), sync_(sync) {
  kept_ = writeHeldState(gatherer_, net, optimizer, sync);
}

const StateWriter& HeldStateSource::whole() {
  if (!whole_) {
    whole_.emplace();
    whole_->reserve(gatherer_.writtenSize());  // one buffer (StateWriter::reserve)
    (void)writeHeldState(*whole_, net_, optimizer_, sync_);
  }
  return *whole_;
}

void HeldStateSource::give(Transport& transport, int rank, bool inPlace,
                           std::vector<WorkPtr>& pending) {
  const uint64_t& size = sizes_.emplace_back(inPlace ? gatherer_.size() : whole().size());
  pending.push_back(transport.send(rank, tags::kElasticState, &size, sizeof size));
  if (inPlace) {
    pending.push_back(
        transport.send(rank, tags::kElasticState, gatherer_.bytes().data(), gatherer_.size()));
  }
  uint8_t ready = 0;
  transport.recv(rank, tags::kElasticState, &ready, sizeof ready)->wait();
  if (!inPlace) {
    const StateWriter& all = whole();
    pending.push_back(transport.send(rank, tags::kElasticState, all.bytes().data(), all.size()));
    return;
  }
  for (const std::span<const uint8_t>& segment : gatherer_.segments()) {
    pending.push_back(transport.send(rank, tags::kElasticState, segment.data(), segment.size()));
  }
}

void receiveHeldState(Transport& transport, bool inPlace, Model& net,
                      torch::optim::Optimizer& optimizer, std::vector<uint8_t>* sync) {
  uint64_t size = 0;
  transport.recv(0, tags::kElasticState, &size, sizeof size)->wait();
  if (inPlace) {
    receiveInPlace(transport, size, net, optimizer, sync);
  } else {
    receiveWhole(transport, size, net, optimizer, sync);
  }
}

void abandonTransfers(Transport& transport, const std::vector<WorkPtr>& pending,
                      std::exception_ptr why) {
  transport.abort(why != nullptr
                      ? why
                      : std::make_exception_ptr(Error("the elastic state's transfer was abandoned",
                                                      {.rank = transport.rank()})));
  for (const WorkPtr& work : pending) {
    try {
      work->wait();
    } catch (...) {  // the abort's, as meant
    }
  }
}

}  // namespace gradsync
