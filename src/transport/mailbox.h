// Matches incoming messages with posted receives, per (sender, tag), in arrival order.
// Shared by every transport so that matching semantics are identical everywhere.
//
// A message that arrives before its receive is posted is buffered ("unexpected") and copied
// when the receive is posted; one that finds its receive posted is written straight into the
// caller's buffer (zero copy). Thread-safe: receives are posted by application threads while
// a transport thread delivers.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "gradsync/transport.h"

namespace gradsync {

// A message that arrived before its receive was posted.
struct Unexpected {
  explicit Unexpected(size_t n) : data(new uint8_t[n]), size(n) {}  // uninitialised: overwritten
  std::unique_ptr<uint8_t[]> data;
  size_t size;
  bool filled = false;  // the whole payload has arrived
  WorkPtr waiter;       // a receive posted while the payload was still arriving
  uint8_t* waiterData = nullptr;
  std::exception_ptr abandoned;  // it will never complete (abandonDelivery): its receive fails
};

class Mailbox {
 public:
  Mailbox(int rank, std::chrono::milliseconds timeout) : rank_(rank), timeout_(timeout) {}

  // Posts a receive of exactly `bytes` bytes from `peer` with `tag` into `data`.
  WorkPtr postRecv(int peer, uint64_t tag, void* data, size_t bytes);

  // Where the payload of an arriving message goes. Fill `dest` with `bytes` bytes, then call
  // endDelivery. Obtained from beginDelivery; owned by the delivering thread.
  struct Delivery {
    uint8_t* dest = nullptr;
    size_t bytes = 0;
    WorkPtr work;                          // the matched receive, if one was posted
    std::shared_ptr<Unexpected> buffered;  // else the buffer holding the message
    std::vector<uint8_t> discard;          // payload of a message whose receive was refused
  };
  Delivery beginDelivery(int peer, uint64_t tag, size_t bytes);
  void endDelivery(Delivery& delivery);
  // Delivers a whole message that is already in memory (loopback sends, messages to oneself).
  void deliver(int peer, uint64_t tag, const void* data, size_t bytes);

  // Fails the receive a half-arrived message was going to (the message will never complete),
  // or, if none is posted yet, the receive that will match it.
  void abandonDelivery(Delivery& delivery, const std::exception_ptr& error);
  // Fails every posted receive, and every later one, with `error` (a lost peer). Receives
  // matched to a message still arriving are failed through abandonDelivery.
  void failAll(std::exception_ptr error);
  // Fails posted and later receives from `peer` (it shut down) once its buffered messages are
  // consumed.
  void closePeer(int peer, std::exception_ptr error);

 private:
  struct Posted {
    uint8_t* data;
    size_t bytes;
    WorkPtr work;
  };
  struct Queue {
    std::deque<Posted> posted;
    std::deque<std::shared_ptr<Unexpected>> unexpected;
  };

  WorkPtr makeWork(int peer, uint64_t tag, size_t bytes) const;
  std::exception_ptr sizeMismatch(int peer, uint64_t tag, size_t expected, size_t got) const;

  const int rank_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::map<std::pair<int, uint64_t>, Queue> queues_;
  std::exception_ptr broken_;
  std::map<int, std::exception_ptr> closed_;
};

}  // namespace gradsync
