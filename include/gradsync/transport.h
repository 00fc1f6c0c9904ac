// Point-to-point messaging between the ranks of one job: the seam under every collective.
//
// Contract (every transport passes tests/conformance/ against it):
//  - send/recv are asynchronous and return a Work; wait() on it blocks until done.
//  - The caller owns the buffers: a send buffer must stay valid and unchanged, and a receive
//    buffer valid, until the Work completes (or fails).
//  - Messages from one sender to one receiver with the same tag are matched in the order they
//    were sent. Different tags are independent streams.
//  - A receive must name the exact message size; a mismatch fails it with ProtocolError (a size
//    disagreement between ranks is a bug that would otherwise hang or corrupt).
//  - Once a peer is lost, every pending and later operation fails with PeerLostError naming the
//    lost rank: one lost rank breaks every collective, so failing fast beats timing out.
//  - Every wait is bounded by TransportOptions::timeout (TimeoutError names the peer). A timeout
//    leaves the operation pending (its buffer still in use), and a peer that said goodbye fails
//    only the operations that involve it: a caller that gives up on a set of operations after
//    one failed must call abort() before releasing their buffers. The collectives do.
// send, recv and Work methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gradsync {

class Topology;

struct TransportOptions {
  // Upper bound of every wait; a Work not done by then fails with TimeoutError.
  std::chrono::milliseconds timeout{60'000};
  // Per-link emulated bandwidth in bytes/s (0 = unlimited) and one-way latency added to each
  // message (TCP only: the kernel here cannot add latency with netem).
  double bandwidthBytesPerSec = 0;
  std::chrono::microseconds latency{0};
  // Largest message the TCP transport accepts; larger frames are refused as malformed.
  size_t maxMessageBytes = size_t{1} << 31;
};

// Completion of one asynchronous send or receive.
class Work {
 public:
  enum class Kind { kSend, kRecv };
  Work(Kind kind, int rank, int peer, uint64_t tag, size_t bytes,
       std::chrono::milliseconds timeout);

  // Blocks until the operation completes; rethrows its failure; throws TimeoutError after the
  // transport timeout, naming the peer, direction, size and tag.
  void wait();
  bool done() const;

  // For transports: mark the outcome. The first call wins; later calls are ignored.
  void complete();
  void fail(std::exception_ptr error);

  // For transports whose waiting threads can move data themselves (shared memory: the waiting
  // thread reads the rings instead of waiting for the transport's thread to, one wake-up less
  // per message). wait() then calls progress(*this, deadline) until the work is done instead of
  // sleeping on its condition variable; progress returns after making progress or sleeping a
  // while (it looks at done() before it sleeps; never past the deadline, never throwing), or
  // returns false if it cannot help any more (its transport is gone), and wait() blocks as
  // usual from then on. Set by the transport before it returns the Work.
  using Progress =
      std::function<bool(const Work& work, std::chrono::steady_clock::time_point deadline)>;
  void setProgress(Progress progress) { progress_ = std::move(progress); }

  Kind kind() const { return kind_; }
  int peer() const { return peer_; }
  uint64_t tag() const { return tag_; }
  size_t bytes() const { return bytes_; }
  std::string describe() const;

 private:
  const Kind kind_;
  const int rank_, peer_;
  const uint64_t tag_;
  const size_t bytes_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  Progress progress_;
};
using WorkPtr = std::shared_ptr<Work>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const TransportOptions& options() const = 0;

  // Starts sending `bytes` bytes at `data` to `peer`. See the contract above.
  virtual WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) = 0;
  // Starts receiving the next `bytes`-byte message from `peer` with `tag` into `data`.
  virtual WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) = 0;

  // Fails every pending and later operation with `error` and forgets every caller buffer;
  // returns once the transport no longer touches any of them. The transport is unusable after.
  virtual void abort(std::exception_ptr error) = 0;

  // Bytes handed to the network so far by this rank (payloads and frame headers; messages to
  // itself excluded). Thread-safe; for metrics.
  virtual uint64_t bytesSent() const = 0;
  // What bytesSent() counts per message on top of its payload (a frame header).
  virtual size_t messageOverheadBytes() const { return 0; }

  // Which ranks share a host (gradsync/topology.h), if this transport knows: the one
  // gradsync::init connects does (host identities exchanged at rendezvous, or
  // --ranks-per-host); null means unknown, and hierarchical algorithms then run flat. Owned by
  // the transport, unchanged for its lifetime.
  virtual const Topology* topology() const { return nullptr; }
};

// Some of `parent`'s ranks as a transport of their own (a process set, a torch.distributed
// group): rank i of the result is `ranks[i]` of `parent`. ConfigError unless the ranks are
// distinct, in range and include the caller's. Messages pass through with their tags unchanged,
// so groups that share ranks must use distinct tags. Refers to `parent`, which must outlive it;
// as thread-safe as `parent`.
std::unique_ptr<Transport> subsetTransport(Transport& parent, std::vector<int> ranks);

}  // namespace gradsync
