// Rendezvous key-value store: how the ranks of one job find each other.
//
// Keys are strings, values are byte strings. Every blocking call takes a timeout and throws
// gradsync::TimeoutError naming the missing keys when it expires; nothing waits forever.
// Implementations: InMemoryStore (threads in one process), FileStore (a shared directory),
// TcpStore (rank 0 serves, the others connect; see rendezvous/tcp_store.h).
// All methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gradsync {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any previous value, and wakes waiters on it.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Returns the value of `key`, waiting up to `timeout` for it to be set.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (absent = 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Waits up to `timeout` until every key in `keys` is set.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // Convenience for text values.
  void setString(const std::string& key, const std::string& value);
  std::string getString(const std::string& key, std::chrono::milliseconds timeout);
};

// A store held in memory, shared by threads of one process (tests, loopback ranks).
std::shared_ptr<Store> makeInMemoryStore();

// A store kept as files in `directory` (created if missing), shared by processes that see the
// same file system. Values are written atomically (temporary file + rename).
std::shared_ptr<Store> makeFileStore(const std::string& directory);

}  // namespace gradsync
