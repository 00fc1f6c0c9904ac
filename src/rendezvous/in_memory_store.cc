// The in-memory store: a map guarded by one mutex, with one condition variable that every set()
// notifies (waiters re-check their own keys; rendezvous traffic is too small to need more).
#include <condition_variable>
#include <map>
#include <mutex>

#include "gradsync/store.h"
#include "rendezvous/store_util.h"

namespace gradsync {

namespace rendezvous {
namespace {

class InMemoryStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    waitLocked(lock, {key}, timeout, "store.get");
    return values_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t result = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Bytes& slot = values_[key];
      result = addToCounter(slot, delta, key);
      slot = formatCounter(result);
    }
    changed_.notify_all();
    return result;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    waitLocked(lock, keys, timeout, "store.wait");
  }

 private:
  void waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                  std::chrono::milliseconds timeout, const char* operation) {
    auto allSet = [&] {
      for (const auto& key : keys) {
        if (!values_.contains(key)) return false;
      }
      return true;
    };
    if (changed_.wait_for(lock, clampTimeout(timeout), allSet)) return;
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (!values_.contains(key)) missing.push_back(key);
    }
    throwStoreTimeout(operation, missing, keys.size(), timeout, "the in-memory store");
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;
};

}  // namespace
}  // namespace rendezvous

std::shared_ptr<Store> makeInMemoryStore() {
  return std::make_shared<rendezvous::InMemoryStore>();
}

}  // namespace gradsync
