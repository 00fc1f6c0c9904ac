// The shared-memory transport (shm_transport.h).
//
// Threading. Application threads write their sends into the channels themselves (channel.h
// locks the out side). Reading, the in side of every channel, is done by whoever holds
// readMutex_: a thread waiting for one of this transport's works (Work::setProgress: it reads
// every channel, so one waiter serves the others too, then sleeps on the doorbell, which the
// peers ring when they write), or the loop thread when no thread waits (messages that arrive
// ahead of their receive, acknowledgements). A waiter woken by a peer thus handles the message
// itself: one wake-up per message instead of two (the loop thread's, then the waiter's). The
// loop thread also checks the peers' liveness every 20 ms and carries out abort().
#include "transport/shm/shm_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <shared_mutex>
#include <thread>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "common/socket.h"
#include "gradsync/error.h"
#include "transport/checks.h"
#include "transport/shm/channel.h"
#include "transport/shm/shm_layout.h"

namespace gradsync {
namespace {

using shm::Channel;
using shm::FrameType;
using MonotonicClock = std::chrono::steady_clock;

// How often the loop looks whether the peers' processes still exist, and so the longest anyone
// sleeps on the doorbell.
constexpr std::chrono::milliseconds kLivenessPeriod{20};
// How long after the last wait the loop thread starts reading for the application (loop()).
constexpr std::chrono::microseconds kHandover{200};
// How long a closing transport waits for its queued sends before saying goodbye anyway.
constexpr std::chrono::milliseconds kCloseWait{10'000};
// Payload bytes read from one peer before the reader turns to the next.
constexpr size_t kReadBudget = size_t{4} << 20;

// ShmTransportOptions::spinMicros resolved: -1 polls where the host's ranks have a core each.
int spinMicrosFor(int option, size_t localRanks) {
  if (option >= 0) return option;
  cpu_set_t cpus;
  const bool known = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0;
  const size_t cores = known ? static_cast<size_t>(CPU_COUNT(&cpus)) : 1;
  return localRanks <= cores ? ShmTransportOptions::kSpinMicros : 0;
}

class ShmTransport;

// What a Work's progress function reaches the transport through: valid until the transport's
// destructor clears it (waiting for progress calls in flight), so a Work waited on after its
// transport is gone falls back to blocking.
struct Anchor {
  std::shared_mutex mutex;
  ShmTransport* transport = nullptr;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(int rank, int size, const ShmTransportOptions& options, shm::HostSegments segments);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const TransportOptions& options() const override { return options_.transport; }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  uint64_t bytesSent() const override { return bytesSent_.load(std::memory_order_relaxed); }
  void abort(std::exception_ptr error) override;

  // A waiting thread's turn (Work::Progress): reads what it can, or sleeps on the doorbell
  // unless `work` is done.
  void waitProgress(const Work& work, MonotonicClock::time_point deadline);
  bool pollUntilRung(uint32_t seen, const Work& work) const;

 private:
  void addChannel(uint32_t slot, uint32_t mine);
  WorkPtr withProgress(WorkPtr work) const;
  void loop();
  bool pump(bool byWaiter);                        // REQUIRES: readMutex_
  bool takeAbortRequest();                         // REQUIRES: readMutex_
  bool waiterActive() const;                       // a thread waits, or waited within kHandover
  bool requested() const;                          // an abort, a close not drained yet, or a stop
  void checkLiveness();                            // REQUIRES: readMutex_
  void breakAll(const std::exception_ptr& error);  // REQUIRES: readMutex_
  bool drained() const;
  void farewell();  // REQUIRES: readMutex_
  Channel& channelTo(int peer) const;

  const int rank_;
  const int size_;
  const ShmTransportOptions options_;
  Mailbox mailbox_;
  shm::HostSegments segments_;
  shm::Doorbell& bell_;
  const int spinMicros_;
  std::shared_ptr<Anchor> anchor_;

  std::vector<std::unique_ptr<Channel>> channels_;  // by rank; null for self and other hosts
  std::vector<Channel*> active_;                    // the non-null ones

  // The reader's state.
  std::mutex readMutex_;
  std::vector<std::pair<Channel*, Fd>> pidfds_;  // peers in other processes
  bool broken_ = false;
  bool saidFarewell_ = false;
  std::atomic<int> waiters_{0};
  std::atomic<MonotonicClock::rep> lastWaitEnded_{0};  // time_since_epoch of the last wait's end

  // Shared with application threads.
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr brokenError_;
  std::exception_ptr abortRequest_;
  bool closing_ = false;
  bool stop_ = false;
  bool drained_ = false;

  std::atomic<uint64_t> bytesSent_{0};
  std::thread thread_;
};

ShmTransport::ShmTransport(int rank, int size, const ShmTransportOptions& options,
                           shm::HostSegments segments)
    : rank_(rank),
      size_(size),
      options_(options),
      mailbox_(rank, options.transport.timeout),
      segments_(std::move(segments)),
      bell_(segments_.own.header().doorbell),
      spinMicros_(spinMicrosFor(options.spinMicros, segments_.locals.size())),
      anchor_(std::make_shared<Anchor>()),
      channels_(size) {
  const uint32_t mine = segments_.slotOf(rank);
  for (uint32_t slot = 0; slot < segments_.locals.size(); ++slot) {
    if (slot != mine) addChannel(slot, mine);
  }
  anchor_->transport = this;
  thread_ = std::thread([this] {
    setThreadLogRank(rank_);
    loop();
  });
}

void ShmTransport::addChannel(uint32_t slot, uint32_t mine) {
  const int peer = segments_.locals[slot];
  shm::Segment& theirs = segments_.peers[slot];
  const pid_t pid = theirs.header().pid;
  shm::ChannelConfig config{.rank = rank_,
                            .peer = peer,
                            .peerPid = pid,
                            .maxMessageBytes = options_.transport.maxMessageBytes};
  channels_[peer] = std::make_unique<Channel>(config, theirs.ring(mine), segments_.own.ring(slot),
                                              theirs.header().doorbell, mailbox_);
  active_.push_back(channels_[peer].get());
  if (pid == ::getpid()) return;  // ranks as threads of this process: nothing to watch
  Fd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd.valid()) {
    throw PeerLostError(
        fmt::format("rank {} (process {}) is gone: {}", peer, pid, errnoText(errno)),
        {.rank = rank_, .peer = peer, .operation = "shm connect"});
  }
  pidfds_.emplace_back(channels_[peer].get(), std::move(fd));
}

ShmTransport::~ShmTransport() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  cv_.notify_all();
  bell_.ring();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, std::min(kCloseWait, options_.transport.timeout),
                 [this] { return drained_ || brokenError_; });
    stop_ = true;
  }
  cv_.notify_all();
  bell_.ring();
  thread_.join();
  std::unique_lock<std::shared_mutex> lock(anchor_->mutex);
  anchor_->transport = nullptr;
}

WorkPtr ShmTransport::withProgress(WorkPtr work) const {
  work->setProgress([anchor = std::weak_ptr<Anchor>(anchor_)](const Work& waited,
                                                              MonotonicClock::time_point deadline) {
    std::shared_ptr<Anchor> held = anchor.lock();
    if (!held) return false;
    std::shared_lock<std::shared_mutex> lock(held->mutex);
    if (held->transport == nullptr) return false;
    held->transport->waitProgress(waited, deadline);
    return true;
  });
  return work;
}

Channel& ShmTransport::channelTo(int peer) const {
  if (!channels_[peer]) {
    throw ConfigError(fmt::format("rank {} is not on this host: shared memory reaches ranks {}",
                                  peer, fmt::join(segments_.locals, ", ")),
                      {.rank = rank_, .peer = peer, .operation = "shm send"});
  }
  return *channels_[peer];
}

WorkPtr ShmTransport::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  checkPeerRank(rank_, size_, peer);
  checkMessageSize(rank_, peer, bytes, options_.transport.maxMessageBytes);
  auto work = std::make_shared<Work>(Work::Kind::kSend, rank_, peer, tag, bytes,
                                     options_.transport.timeout);
  if (peer == rank_) {
    mailbox_.deliver(rank_, tag, data, bytes);
    work->complete();
    if (waiters_.load(std::memory_order_seq_cst) > 0) bell_.ring();  // it may be theirs
    return work;
  }
  Channel& channel = channelTo(peer);  // refuses ranks of other hosts
  const bool single = options_.singleCopyMinBytes > 0 && bytes >= options_.singleCopyMinBytes &&
                      segments_.peerCanRead(peer);
  shm::OutFrame frame{.header = {.type = single ? FrameType::kSingleCopy : FrameType::kEager,
                                 .tag = tag,
                                 .bytes = bytes,
                                 .address = reinterpret_cast<uintptr_t>(data)},
                      .data = static_cast<const uint8_t*>(data),
                      .work = work};
  bytesSent_.fetch_add(bytes + sizeof(shm::FrameHeader), std::memory_order_relaxed);
  if (channel.goodbyeReceived()) {
    work->fail(
        std::make_exception_ptr(PeerLostError(fmt::format("rank {} has shut down", peer),
                                              {.rank = rank_, .peer = peer, .operation = "send"})));
    return work;
  }
  // Written here if nothing is queued before it; what does not fit a reader writes later.
  if (channel.send(std::move(frame))) bell_.ring();
  return withProgress(std::move(work));
}

WorkPtr ShmTransport::recv(int peer, uint64_t tag, void* data, size_t bytes) {
  checkPeerRank(rank_, size_, peer);
  if (peer != rank_) channelTo(peer);
  return withProgress(mailbox_.postRecv(peer, tag, data, bytes));
}

void ShmTransport::abort(std::exception_ptr error) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (brokenError_) return;
  abortRequest_ = error;
  lock.unlock();
  cv_.notify_all();
  bell_.ring();
  lock.lock();
  cv_.wait_for(lock, std::chrono::seconds(5), [this] { return brokenError_ != nullptr; });
}

// The epoch is read before anything else: whoever completes the work afterwards rings the
// doorbell after completing it, so the sleep below either sees done() or returns at once.
void ShmTransport::waitProgress(const Work& work, MonotonicClock::time_point deadline) {
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = bell_.current();
  bool progress = work.done();
  if (!progress) {
    if (std::unique_lock<std::mutex> reader(readMutex_, std::try_to_lock); reader.owns_lock()) {
      progress = pump(/*byWaiter=*/true);
    }
  }
  if (!progress && !work.done() && !pollUntilRung(seen, work)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline - MonotonicClock::now());
    bell_.sleep(seen, std::clamp<std::chrono::microseconds>(left, {}, kLivenessPeriod));
  }
  // The loop takes over kHandover after the last wait ends (loop()); no wake-up needed.
  lastWaitEnded_.store(MonotonicClock::now().time_since_epoch().count(), std::memory_order_relaxed);
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

// Polls the doorbell (a pause instruction between looks) for up to spinMicros_: true if it rang
// or `work` completed meanwhile. The poller is not counted as a sleeper, so a ringer makes no
// system call for it. Measured with 2 ranks on 2 cores: a 4 KiB swap in 10-18 us against 33-44
// us sleeping at once; with 4 ranks on 2 cores polling gained nothing (docs/performance.md).
bool ShmTransport::pollUntilRung(uint32_t seen, const Work& work) const {
  if (spinMicros_ <= 0) return false;
  const auto until = MonotonicClock::now() + std::chrono::microseconds(spinMicros_);
  do {
    if (bell_.current() != seen || work.done()) return true;
    __builtin_ia32_pause();
  } while (MonotonicClock::now() < until);
  return false;
}

// Reads and flushes every channel. A reader that delivered something rings the doorbell when
// other threads wait, since what it delivered may be theirs.
bool ShmTransport::pump(bool byWaiter) {
  if (broken_) return false;
  bool progress = false;
  for (Channel* channel : active_) {
    try {
      progress = channel->flush() || progress;
      progress = channel->read(kReadBudget) || progress;
    } catch (const Error&) {
      breakAll(std::current_exception());
      return true;
    }
  }
  if (progress && waiters_.load(std::memory_order_seq_cst) > (byWaiter ? 1 : 0)) bell_.ring();
  return progress;
}

// While application threads wait (or waited within kHandover), they read, and the loop keeps
// off the channels and readMutex_ except for its liveness checks and requests (abort, close):
// a collective's back-to-back waits then cost no wake-up of the loop thread, which would take a
// core and a system call per message. Once no thread has waited for kHandover the loop reads
// for them, sleeping on the doorbell.
void ShmTransport::loop() {
  auto lastCheck = MonotonicClock::now();
  for (;;) {
    const uint32_t seen = bell_.current();
    const bool waited = waiterActive();
    const bool checkDue = MonotonicClock::now() - lastCheck >= kLivenessPeriod;
    bool progress = false;
    const bool reads = !waited || checkDue || requested();
    if (reads) {
      std::lock_guard<std::mutex> reader(readMutex_);
      progress = takeAbortRequest();
      if (!waited) progress = pump(false) || progress;
      if (checkDue) {
        checkLiveness();
        lastCheck = MonotonicClock::now();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (closing_ && !drained_ && drained()) {
        farewell();
        drained_ = true;
        cv_.notify_all();
      }
      if (stop_) {
        farewell();
        return;
      }
    }
    // A waiter that found readMutex_ taken just now may have gone to sleep on what arrived.
    if (waited && reads) bell_.ring();
    if (progress) continue;
    if (waited) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, kHandover, [this] { return abortRequest_ || stop_; });
    } else {
      bell_.sleep(seen, kLivenessPeriod);
    }
  }
}

bool ShmTransport::waiterActive() const {
  if (waiters_.load(std::memory_order_seq_cst) > 0) return true;
  const auto ended = MonotonicClock::time_point(
      MonotonicClock::duration(lastWaitEnded_.load(std::memory_order_relaxed)));
  return MonotonicClock::now() - ended < kHandover;
}

bool ShmTransport::requested() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return abortRequest_ || stop_ || (closing_ && !drained_);
}

bool ShmTransport::takeAbortRequest() {
  std::exception_ptr abortRequest;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abortRequest = std::exchange(abortRequest_, nullptr);
  }
  if (abortRequest) breakAll(abortRequest);
  return abortRequest != nullptr;
}

// A peer process that ended is readable on its pidfd. Its last frames are still in this rank's
// segment, so they are read before deciding whether it left cleanly (goodbye) or was lost.
void ShmTransport::checkLiveness() {
  if (broken_) return;
  for (auto& [channel, fd] : pidfds_) {
    if (!fd.valid()) continue;
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    fd.reset();
    try {
      channel->peerExited();
    } catch (const Error&) {
      breakAll(std::current_exception());
      return;
    }
  }
}

void ShmTransport::breakAll(const std::exception_ptr& error) {
  if (broken_) return;
  broken_ = true;
  const AbortNotice notice = abortNoticeOf(error, rank_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    brokenError_ = error;
  }
  cv_.notify_all();
  mailbox_.failAll(error);
  for (Channel* channel : active_) {
    channel->failAll(error);
    channel->close(shm::kAbort, notice.reason, notice.origin);
  }
  saidFarewell_ = true;
  bell_.ring();  // waiters look at their works again
  if (options_.onBroken) options_.onBroken(error);
}

bool ShmTransport::drained() const {
  for (const Channel* channel : active_) {
    if (channel->busy()) return false;
  }
  return true;
}

// Goodbye after the last frame; a transport that broke has said abort instead. Queued sends
// still unwritten (the close wait ran out) fail here rather than hang their callers.
void ShmTransport::farewell() {
  if (saidFarewell_) return;
  saidFarewell_ = true;
  auto closed =
      std::make_exception_ptr(PeerLostError("the transport was closed with this send still queued",
                                            {.rank = rank_, .operation = "send"}));
  for (Channel* channel : active_) {
    channel->failAll(closed);
    channel->close(shm::kGoodbye, "");
  }
}

}  // namespace

std::unique_ptr<Transport> connectShmTransport(Store& store, int rank, int size,
                                               const std::vector<int>& locals,
                                               const ShmTransportOptions& options) {
  shm::HostSegments segments = shm::connectSegments(store, rank, size, locals, options);
  return std::make_unique<ShmTransport>(rank, size, options, std::move(segments));
}

}  // namespace gradsync
