#include <fmt/format.h>

#include "gradsync/error.h"
#include "gradsync/transport.h"

namespace gradsync {

Work::Work(Kind kind, int rank, int peer, uint64_t tag, size_t bytes,
           std::chrono::milliseconds timeout)
    : kind_(kind), rank_(rank), peer_(peer), tag_(tag), bytes_(bytes), timeout_(timeout) {}

std::string Work::describe() const {
  return kind_ == Kind::kSend
             ? fmt::format("send of {} bytes to rank {} (tag {})", bytes_, peer_, tag_)
             : fmt::format("receive of {} bytes from rank {} (tag {})", bytes_, peer_, tag_);
}

void Work::wait() {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::unique_lock<std::mutex> lock(mutex_);
  while (progress_ && !done_ && std::chrono::steady_clock::now() < deadline) {
    lock.unlock();
    const bool helping = progress_(*this, deadline);
    lock.lock();
    if (!helping) break;
  }
  if (!cv_.wait_until(lock, deadline, [this] { return done_; })) {
    throw TimeoutError(
        fmt::format("{} did not complete within {} ms", describe(), timeout_.count()),
        {.rank = rank_,
         .peer = peer_,
         .operation = "wait",
         .hint = fmt::format("rank {} is stalled or far behind; check its log, or raise --timeout",
                             peer_)});
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Work::complete() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
  }
  cv_.notify_all();
}

void Work::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace gradsync
