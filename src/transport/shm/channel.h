// Both directions between this rank and one other rank of its host: the frames queued for the
// peer's inbound ring (`out`, in the peer's segment) and the parse state of the frames arriving
// in this rank's ring from the peer (`in`, in this rank's segment).
//
// Threading: the out side (send, flush, busy, failAll) is locked, so application threads write
// a frame straight into the ring when nothing is queued before it (no hand-off to the loop
// thread: one wake-up less per message); the in side (read, peerExited) is the loop thread's
// only.
//
// Frames (40-byte header, host byte order: both ends are one machine):
//   eager        header, then the payload through the ring (copied in, then out: two copies)
//   single-copy  header only; the receiver copies the payload straight from the sender's memory
//                (process_vm_readv: one copy), then sends an ack, which completes the send.
//                Used from `singleCopyMinBytes` up when the receiver found at connect time that
//                the kernel lets it read the sender (containers may forbid it).
//   ack          the id of a single-copy send whose payload the receiver has copied
// A sender that is done writes its ring's state (ring.h): goodbye, or abort with a reason.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <unordered_map>

#include "transport/mailbox.h"
#include "transport/shm/doorbell.h"
#include "transport/shm/ring.h"

namespace gradsync::shm {

enum class FrameType : uint32_t { kEager = 1, kSingleCopy = 2, kAck = 3 };

struct FrameHeader {
  FrameType type = FrameType::kEager;
  uint32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t bytes = 0;    // payload bytes
  uint64_t address = 0;  // single-copy: where the payload is in the sender's memory
  uint64_t id = 0;       // single-copy and ack: the send's number
};
static_assert(sizeof(FrameHeader) == 40);

struct OutFrame {
  FrameHeader header;
  const uint8_t* data = nullptr;  // eager payload (the caller's buffer)
  size_t written = 0;             // of header and eager payload
  WorkPtr work;                   // null for acks
};

struct ChannelConfig {
  int rank = 0;  // this rank and the peer, as ranks of the job
  int peer = 0;
  pid_t peerPid = 0;
  uint64_t maxMessageBytes = 0;
};

class Channel {
 public:
  Channel(const ChannelConfig& config, Ring out, Ring in, Doorbell& peerBell, Mailbox& mailbox);

  int peer() const { return config_.peer; }

  // Writes the frame now if nothing is queued before it and it fits, else queues it (a
  // single-copy frame gets its id here). Returns whether frames remain queued: the loop thread
  // must then be woken to flush them. Any thread.
  bool send(OutFrame frame);
  // Writes what fits of the queued frames; returns whether anything was written. Completes eager
  // sends once written; single-copy sends wait for their ack. Any thread.
  bool flush();
  // Frames waiting to be written, or single-copy sends waiting for their ack.
  bool busy() const;

  // Reads arriving frames (up to about `budget` payload bytes) into the mailbox; returns whether
  // anything was read. Throws PeerLostError when the peer aborted (naming its reason) or
  // vanished inside a message, ProtocolError on a malformed frame.
  bool read(size_t budget);
  // The peer's goodbye has been read (after all of its frames). Any thread.
  bool goodbyeReceived() const { return goodbye_.load(std::memory_order_acquire); }
  // The peer's process ended: reads what it left, then throws PeerLostError unless it said
  // goodbye.
  void peerExited();

  // Fails queued frames, sends awaiting acks, a half-arrived message and every later send
  // with `error`.
  void failAll(const std::exception_ptr& error);
  // This side's farewell to the peer (after the last frame), and a wake-up for it.
  void close(RingState state, const std::string& reason, int origin = -1);

 private:
  bool writeQueued();  // REQUIRES: outMutex_
  bool readHeader();
  bool readPayload(size_t& budget);
  void copyFromPeer(const FrameHeader& header);
  void checkFarewell();
  std::exception_ptr lostError(const std::string& why) const;
  std::exception_ptr abortError() const;

  const ChannelConfig config_;
  Ring out_, in_;
  Doorbell& peerBell_;
  Mailbox& mailbox_;

  mutable std::mutex outMutex_;
  std::deque<OutFrame> queue_;                         // guarded by outMutex_
  std::unordered_map<uint64_t, WorkPtr> awaitingAck_;  // guarded by outMutex_
  uint64_t nextId_ = 1;                                // guarded by outMutex_
  std::exception_ptr failed_;  // guarded by outMutex_: set by failAll, fails later sends

  FrameHeader header_{};
  size_t headerRead_ = 0;
  bool inPayload_ = false;
  size_t payloadRead_ = 0;
  Mailbox::Delivery delivery_;
  std::atomic<bool> goodbye_{false};
};

}  // namespace gradsync::shm
