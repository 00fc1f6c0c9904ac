#include "transport/mailbox.h"

#include <cstring>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {

WorkPtr Mailbox::makeWork(int peer, uint64_t tag, size_t bytes) const {
  return std::make_shared<Work>(Work::Kind::kRecv, rank_, peer, tag, bytes, timeout_);
}

std::exception_ptr Mailbox::sizeMismatch(int peer, uint64_t tag, size_t expected,
                                         size_t got) const {
  return std::make_exception_ptr(ProtocolError(
      fmt::format("expected a {}-byte message from rank {} (tag {}) but it sent {} bytes", expected,
                  peer, tag, got),
      {.rank = rank_,
       .peer = peer,
       .operation = "recv",
       .hint = "the ranks disagree on tensor sizes: are they running the same configuration?"}));
}

WorkPtr Mailbox::postRecv(int peer, uint64_t tag, void* data, size_t bytes) {
  WorkPtr work = makeWork(peer, tag, bytes);
  auto* dest = static_cast<uint8_t*>(data);
  std::unique_lock<std::mutex> lock(mutex_);
  if (broken_) {
    lock.unlock();
    work->fail(broken_);
    return work;
  }
  Queue& queue = queues_[{peer, tag}];
  if (queue.unexpected.empty()) {
    auto closed = closed_.find(peer);
    if (closed != closed_.end()) {
      lock.unlock();
      work->fail(closed->second);
      return work;
    }
    queue.posted.push_back({dest, bytes, work});
    return work;
  }
  std::shared_ptr<Unexpected> message = std::move(queue.unexpected.front());
  queue.unexpected.pop_front();
  if (message->size != bytes) {
    lock.unlock();
    work->fail(sizeMismatch(peer, tag, bytes, message->size));
    return work;
  }
  if (message->abandoned) {
    lock.unlock();
    work->fail(message->abandoned);
    return work;
  }
  if (!message->filled) {  // still arriving: endDelivery completes it
    message->waiter = work;
    message->waiterData = dest;
    return work;
  }
  lock.unlock();
  if (bytes > 0) std::memcpy(dest, message->data.get(), bytes);
  work->complete();
  return work;
}

Mailbox::Delivery Mailbox::beginDelivery(int peer, uint64_t tag, size_t bytes) {
  Delivery delivery;
  delivery.bytes = bytes;
  std::unique_lock<std::mutex> lock(mutex_);
  Queue& queue = queues_[{peer, tag}];
  if (queue.unexpected.empty() && !queue.posted.empty()) {
    Posted posted = queue.posted.front();
    queue.posted.pop_front();
    lock.unlock();
    if (posted.bytes == bytes) {
      delivery.dest = posted.data;
      delivery.work = std::move(posted.work);
    } else {
      posted.work->fail(sizeMismatch(peer, tag, posted.bytes, bytes));
      delivery.discard.resize(bytes);
      delivery.dest = delivery.discard.data();
    }
    return delivery;
  }
  auto message = std::make_shared<Unexpected>(bytes);
  delivery.dest = message->data.get();
  delivery.buffered = message;
  queue.unexpected.push_back(std::move(message));
  return delivery;
}

void Mailbox::endDelivery(Delivery& delivery) {
  if (delivery.work) {
    delivery.work->complete();
    return;
  }
  if (!delivery.buffered) return;  // discarded
  WorkPtr waiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    delivery.buffered->filled = true;
    waiter = std::move(delivery.buffered->waiter);
  }
  if (waiter) {
    if (delivery.bytes > 0) {
      std::memcpy(delivery.buffered->waiterData, delivery.buffered->data.get(), delivery.bytes);
    }
    waiter->complete();
  }
}

void Mailbox::deliver(int peer, uint64_t tag, const void* data, size_t bytes) {
  Delivery delivery = beginDelivery(peer, tag, bytes);
  if (bytes > 0) std::memcpy(delivery.dest, data, bytes);
  endDelivery(delivery);
}

void Mailbox::abandonDelivery(Delivery& delivery, const std::exception_ptr& error) {
  WorkPtr waiter = std::move(delivery.work);
  if (delivery.buffered) {
    // A receive posted between now and a failAll() would otherwise wait for it forever.
    std::lock_guard<std::mutex> lock(mutex_);
    delivery.buffered->abandoned = error;
    if (!waiter) waiter = std::move(delivery.buffered->waiter);
  }
  delivery = {};
  if (waiter) waiter->fail(error);
}

void Mailbox::failAll(std::exception_ptr error) {
  std::vector<WorkPtr> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_) broken_ = error;
    for (auto& [key, queue] : queues_) {
      for (auto& posted : queue.posted) pending.push_back(std::move(posted.work));
    }
    queues_.clear();
  }
  for (auto& work : pending) work->fail(error);
}

void Mailbox::closePeer(int peer, std::exception_ptr error) {
  std::vector<WorkPtr> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_[peer] = error;
    for (auto& [key, queue] : queues_) {
      if (key.first != peer) continue;
      for (auto& posted : queue.posted) pending.push_back(std::move(posted.work));
      queue.posted.clear();
    }
  }
  for (auto& work : pending) work->fail(error);
}

}  // namespace gradsync
