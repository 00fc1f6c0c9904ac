// The MPI transport. Threading: application threads queue sends (submitMutex_) and post
// receives in the Mailbox; the progress thread makes every MPI call, under Runtime::lock().
//
// Wire: every message is a 24-byte Header (MPI tag kHeaderTag) followed, unless it is empty, by
// its payload in chunks of at most 1 GiB (MPI tag kPayloadTag), on the transport's own
// communicator. MPI keeps the messages of one sender, tag and communicator in order, so the k-th
// header from a rank announces its k-th payload. gradsync's 64-bit tags travel in the header
// (MPI tags are ints, guaranteed only up to 32767) and matching is the Mailbox's, exactly as for
// the other transports.
//
// Buffers: a send copies the caller's data, so abort() never has to wait for MPI to finish
// reading it (MPI cannot cancel a send). A payload is received straight into the posted
// receive's buffer when there is one; abort() cancels those receives before it returns.
#include <atomic>
#include <condition_variable>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"
#include "gradsync/mpi.h"
#include "transport/checks.h"
#include "transport/mailbox.h"
#include "transport/mpi/mpi_runtime.h"

namespace gradsync {
namespace {

using mpi::check;

constexpr int kHeaderTag = 1;
constexpr int kPayloadTag = 2;
constexpr size_t kMaxChunk = size_t{1} << 30;
// How long a closing transport waits for its last sends and its peers' goodbyes.
constexpr std::chrono::milliseconds kGoodbyeWait{10'000};
// Polling MPI is the only way to see messages arrive, but spinning would take a core from
// training: after kBusyRounds rounds without progress the thread sleeps, doubling the pause up
// to kMaxPause (kMaxPauseActive while transfers are under way).
constexpr int kBusyRounds = 64;
constexpr std::chrono::microseconds kMinPause{10}, kMaxPause{1000}, kMaxPauseActive{50};

enum class Kind : uint32_t { kData = 1, kGoodbye = 2 };
struct Header {
  Kind kind;
  uint32_t reserved;
  uint64_t tag;
  uint64_t bytes;
};
static_assert(sizeof(Header) == 24);

struct Outgoing {
  WorkPtr work;  // null for a goodbye
  int peer = 0;
  Header header{};
  std::vector<uint8_t> payload;  // a copy of the caller's data
  std::vector<MPI_Request> requests;
};

struct Incoming {
  Mailbox::Delivery delivery;
  std::vector<MPI_Request> requests;
};

// Posts one MPI request per chunk of [data, data + bytes).
template <class Post>
void postChunks(uint8_t* data, size_t bytes, std::vector<MPI_Request>& requests, Post post) {
  for (size_t offset = 0; offset < bytes; offset += kMaxChunk) {
    requests.emplace_back();
    post(data + offset, static_cast<int>(std::min(kMaxChunk, bytes - offset)), &requests.back());
  }
}

bool testAll(std::vector<MPI_Request>& requests) {
  int done = 0;
  check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
        "MPI_Testall");
  return done != 0;
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, int rank, int size, const TransportOptions& options);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const TransportOptions& options() const override { return options_; }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  uint64_t bytesSent() const override { return bytesSent_.load(std::memory_order_relaxed); }
  size_t messageOverheadBytes() const override { return sizeof(Header); }
  void abort(std::exception_ptr error) override;

 private:
  void submit(std::unique_ptr<Outgoing> message);
  void wake();
  void loop();
  bool progress(std::vector<std::unique_ptr<Outgoing>>& batch);
  bool receiveHeaders();
  void receive(int peer, const Header& header);
  bool testTransfers();
  void breakAll(std::exception_ptr error);
  void pause(int idleRounds);
  void noteIfDrained();

  MPI_Comm comm_;
  const int rank_, size_;
  const TransportOptions options_;
  Mailbox mailbox_;
  std::atomic<uint64_t> bytesSent_{0};

  std::mutex submitMutex_;
  std::condition_variable wakeCv_;   // the progress thread waits here when idle
  std::condition_variable stateCv_;  // abort() and the destructor wait here
  std::vector<std::unique_ptr<Outgoing>> submitted_;
  std::exception_ptr abortRequest_;
  std::exception_ptr broken_;
  bool wakePending_ = false;
  bool closing_ = false, drained_ = false, stop_ = false;

  // Owned by the progress thread.
  std::vector<std::unique_ptr<Outgoing>> sending_;
  std::vector<Incoming> receiving_;
  int goodbyes_ = 0;

  std::thread thread_;
};

MpiTransport::MpiTransport(MPI_Comm comm, int rank, int size, const TransportOptions& options)
    : comm_(comm), rank_(rank), size_(size), options_(options), mailbox_(rank, options.timeout) {
  thread_ = std::thread([this] {
    setThreadLogRank(rank_);
    loop();
  });
}

MpiTransport::~MpiTransport() {
  std::unique_lock<std::mutex> lock(submitMutex_);
  closing_ = true;
  // Goodbyes even after abort(): they tell the peers at once that this rank is gone.
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto goodbye = std::make_unique<Outgoing>();
    goodbye->peer = peer;
    goodbye->header.kind = Kind::kGoodbye;
    submitted_.push_back(std::move(goodbye));
  }
  wakePending_ = true;
  wakeCv_.notify_one();
  stateCv_.wait_for(lock, std::min(kGoodbyeWait, options_.timeout), [this] { return drained_; });
  stop_ = true;
  wakeCv_.notify_one();
  lock.unlock();
  thread_.join();
  std::lock_guard<std::mutex> mpiLock(mpi::Runtime::instance().lock());
  for (Incoming& in : receiving_) {  // a peer vanished mid-message: the caller gave up on it
    for (MPI_Request& request : in.requests) {
      if (request == MPI_REQUEST_NULL) continue;  // this chunk completed
      MPI_Cancel(&request);
      MPI_Request_free(&request);
    }
  }
  for (auto& out : sending_) {  // undelivered: MPI may still read the copy, so it is leaked
    for (MPI_Request& request : out->requests) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
    (void)out.release();
  }
  // A peer that has not said goodbye may still send on this communicator, and Open MPI reuses a
  // freed communicator's context id: its late message would land on the next transport's
  // communicator (with a sequence number that makes MPI hold back that transport's own first
  // message from the peer, a hang). Such a communicator is left allocated instead.
  if (goodbyes_ == size_ - 1) MPI_Comm_free(&comm_);
}

WorkPtr MpiTransport::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  checkPeerRank(rank_, size_, peer);
  checkMessageSize(rank_, peer, bytes, options_.maxMessageBytes);
  auto work = std::make_shared<Work>(Work::Kind::kSend, rank_, peer, tag, bytes, options_.timeout);
  if (peer == rank_) {  // self-messages skip MPI
    mailbox_.deliver(rank_, tag, data, bytes);
    work->complete();
    return work;
  }
  auto message = std::make_unique<Outgoing>();
  message->work = work;
  message->peer = peer;
  message->header = {Kind::kData, 0, tag, bytes};
  const auto* begin = static_cast<const uint8_t*>(data);
  message->payload.assign(begin, begin + bytes);
  bytesSent_.fetch_add(sizeof(Header) + bytes, std::memory_order_relaxed);
  submit(std::move(message));
  return work;
}

WorkPtr MpiTransport::recv(int peer, uint64_t tag, void* data, size_t bytes) {
  checkPeerRank(rank_, size_, peer);
  WorkPtr work = mailbox_.postRecv(peer, tag, data, bytes);
  wake();  // poll eagerly: its message may be arriving
  return work;
}

void MpiTransport::submit(std::unique_ptr<Outgoing> message) {
  std::lock_guard<std::mutex> lock(submitMutex_);
  if (broken_) {
    message->work->fail(broken_);
    return;
  }
  submitted_.push_back(std::move(message));
  wakePending_ = true;
  wakeCv_.notify_one();
}

void MpiTransport::wake() {
  std::lock_guard<std::mutex> lock(submitMutex_);
  wakePending_ = true;
  wakeCv_.notify_one();
}

void MpiTransport::abort(std::exception_ptr error) {
  std::unique_lock<std::mutex> lock(submitMutex_);
  if (broken_) return;
  abortRequest_ = error;
  wakePending_ = true;
  wakeCv_.notify_one();
  stateCv_.wait_for(lock, std::chrono::seconds(5), [this] { return broken_ != nullptr; });
}

void MpiTransport::loop() {
  int idleRounds = 0;
  for (;;) {
    std::vector<std::unique_ptr<Outgoing>> batch;
    std::exception_ptr abortRequest;
    {
      std::lock_guard<std::mutex> lock(submitMutex_);
      if (stop_) return;
      batch.swap(submitted_);
      abortRequest = std::exchange(abortRequest_, nullptr);
    }
    if (abortRequest) breakAll(abortRequest);
    bool moved = false;
    try {
      moved = progress(batch);
    } catch (const Error&) {
      breakAll(std::current_exception());
    }
    noteIfDrained();
    idleRounds = moved ? 0 : idleRounds + 1;
    pause(idleRounds);
  }
}

// Posts the new sends, takes arriving headers and completes finished transfers. Returns whether
// anything happened.
bool MpiTransport::progress(std::vector<std::unique_ptr<Outgoing>>& batch) {
  std::lock_guard<std::mutex> mpiLock(mpi::Runtime::instance().lock());
  for (auto& out : batch) {
    auto* header = reinterpret_cast<uint8_t*>(&out->header);
    out->requests.emplace_back();
    check(MPI_Isend(header, sizeof(Header), MPI_BYTE, out->peer, kHeaderTag, comm_,
                    &out->requests.back()),
          "MPI_Isend");
    postChunks(out->payload.data(), out->payload.size(), out->requests,
               [&](uint8_t* data, int count, MPI_Request* request) {
                 check(MPI_Isend(data, count, MPI_BYTE, out->peer, kPayloadTag, comm_, request),
                       "MPI_Isend");
               });
    sending_.push_back(std::move(out));
  }
  bool moved = !batch.empty();
  moved |= receiveHeaders();
  moved |= testTransfers();
  return moved;
}

bool MpiTransport::receiveHeaders() {
  bool any = false;
  for (int i = 0; i < 64; ++i) {  // bounded, so that sends keep being posted
    int flag = 0;
    MPI_Message message;
    MPI_Status status;
    check(MPI_Improbe(MPI_ANY_SOURCE, kHeaderTag, comm_, &flag, &message, &status), "MPI_Improbe");
    if (!flag) break;
    Header header{};
    check(MPI_Mrecv(&header, sizeof header, MPI_BYTE, &message, &status), "MPI_Mrecv");
    receive(status.MPI_SOURCE, header);
    any = true;
  }
  return any;
}

void MpiTransport::receive(int peer, const Header& header) {
  if (header.kind == Kind::kGoodbye) {
    ++goodbyes_;
    mailbox_.closePeer(peer, std::make_exception_ptr(PeerLostError(
                                 fmt::format("rank {} has shut down", peer),
                                 {.rank = rank_, .peer = peer, .operation = "recv"})));
    return;
  }
  if (header.kind != Kind::kData || header.bytes > options_.maxMessageBytes) {
    throw ProtocolError(fmt::format("malformed message header from rank {} (kind {}, {} bytes)",
                                    peer, static_cast<uint32_t>(header.kind), header.bytes),
                        {.rank = rank_, .peer = peer, .operation = "recv"});
  }
  Incoming in;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    if (broken_) {  // keep draining the peer so that its sends complete, but deliver nothing
      in.delivery.discard.resize(header.bytes);
      in.delivery.dest = in.delivery.discard.data();
      in.delivery.bytes = header.bytes;
    }
  }
  if (!in.delivery.dest) in.delivery = mailbox_.beginDelivery(peer, header.tag, header.bytes);
  postChunks(in.delivery.dest, header.bytes, in.requests,
             [&](uint8_t* data, int count, MPI_Request* request) {
               check(MPI_Irecv(data, count, MPI_BYTE, peer, kPayloadTag, comm_, request),
                     "MPI_Irecv");
             });
  if (in.requests.empty()) {
    mailbox_.endDelivery(in.delivery);
  } else {
    receiving_.push_back(std::move(in));
  }
}

bool MpiTransport::testTransfers() {
  size_t before = sending_.size() + receiving_.size();
  std::erase_if(sending_, [](std::unique_ptr<Outgoing>& out) {
    if (!testAll(out->requests)) return false;
    if (out->work) out->work->complete();
    return true;
  });
  std::erase_if(receiving_, [this](Incoming& in) {
    if (!testAll(in.requests)) return false;
    mailbox_.endDelivery(in.delivery);
    return true;
  });
  return sending_.size() + receiving_.size() != before;
}

// Fails everything with `error`. Cancels the receives writing into callers' buffers, so that
// abort() can return; sends go on from their copies, so that peers are not left hanging.
void MpiTransport::breakAll(std::exception_ptr error) {
  std::vector<std::unique_ptr<Outgoing>> unsent;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    if (broken_) return;
    broken_ = error;
    std::erase_if(submitted_, [&](std::unique_ptr<Outgoing>& out) {
      if (!out->work) return false;  // goodbyes still go
      unsent.push_back(std::move(out));
      return true;
    });
  }
  for (auto& out : unsent) {
    if (out->work) out->work->fail(error);
  }
  mailbox_.failAll(error);
  {
    std::lock_guard<std::mutex> mpiLock(mpi::Runtime::instance().lock());
    for (Incoming& in : receiving_) {
      for (MPI_Request& request : in.requests) {
        if (request != MPI_REQUEST_NULL) MPI_Cancel(&request);
      }
      MPI_Waitall(static_cast<int>(in.requests.size()), in.requests.data(), MPI_STATUSES_IGNORE);
      mailbox_.abandonDelivery(in.delivery, error);
    }
  }
  receiving_.clear();
  for (auto& out : sending_) {
    if (out->work) out->work->fail(error);
  }
  std::lock_guard<std::mutex> lock(submitMutex_);
  stateCv_.notify_all();
}

void MpiTransport::noteIfDrained() {
  std::lock_guard<std::mutex> lock(submitMutex_);
  if (!closing_ || drained_ || !submitted_.empty() || !sending_.empty() || !receiving_.empty()) {
    return;
  }
  if (broken_ || goodbyes_ == size_ - 1) {
    drained_ = true;
    stateCv_.notify_all();
  }
}

void MpiTransport::pause(int idleRounds) {
  if (idleRounds < kBusyRounds) {
    if (idleRounds > 0) std::this_thread::yield();
    return;
  }
  int doublings = std::min(idleRounds - kBusyRounds, 10);
  auto limit = sending_.empty() && receiving_.empty() ? kMaxPause : kMaxPauseActive;
  auto wait = std::min<std::chrono::microseconds>(kMinPause * (1 << doublings), limit);
  std::unique_lock<std::mutex> lock(submitMutex_);
  wakeCv_.wait_for(lock, wait, [this] { return wakePending_ || stop_; });
  wakePending_ = false;
}

}  // namespace

std::unique_ptr<Transport> connectMpiTransport(const MpiTransportOptions& options) {
  if (options.transport.bandwidthBytesPerSec > 0 || options.transport.latency.count() > 0) {
    throw ConfigError("the MPI transport does not emulate bandwidth or latency",
                      {.operation = "mpi connect",
                       .hint = "shape the real links instead (scripts/netem), or use "
                               "--transport tcp for --bandwidth/--latency"});
  }
  mpi::Runtime& runtime = mpi::Runtime::instance();
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, commSize = 0;  // ranks keep their order: split by key worldRank
  {
    std::lock_guard<std::mutex> lock(runtime.lock());
    int worldRank = 0, worldSize = 0;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &worldRank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &worldSize), "MPI_Comm_size");
    int size = options.size == 0 ? worldSize : options.size;
    if (size < 1 || size > worldSize) {
      throw ConfigError(fmt::format("cannot use {} ranks of an MPI job of {}", size, worldSize),
                        {.rank = worldRank, .operation = "mpi connect"});
    }
    int color = worldRank < size ? 0 : MPI_UNDEFINED;
    check(MPI_Comm_split(MPI_COMM_WORLD, color, worldRank, &comm), "MPI_Comm_split");
    if (comm == MPI_COMM_NULL) return nullptr;
    rank = worldRank;
    commSize = size;
  }
  return std::make_unique<MpiTransport>(comm, rank, commSize, options.transport);
}

int mpiWorldRank() {
  std::lock_guard<std::mutex> lock(mpi::Runtime::instance().lock());
  int rank = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  return rank;
}

int mpiWorldSize() {
  std::lock_guard<std::mutex> lock(mpi::Runtime::instance().lock());
  int size = 0;
  check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  return size;
}

}  // namespace gradsync
