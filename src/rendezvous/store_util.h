// Helpers shared by the Store implementations, so that all of them agree on how counters are
// stored and on what their timeout errors say.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gradsync/store.h"

namespace gradsync::rendezvous {

// Counters written by Store::add are stored as decimal ASCII ("42"), so getString reads them.
// Throws ProtocolError naming `key` when `value` is not such an integer; an empty value is 0.
int64_t parseCounter(const Bytes& value, const std::string& key);
Bytes formatCounter(int64_t value);
// parseCounter(current) + delta; throws ProtocolError on overflow.
int64_t addToCounter(const Bytes& current, int64_t delta, const std::string& key);

// The longest wait any store honours: what the TCP store's u32 millisecond field holds (~49 days).
// Clamping also keeps `now + timeout` from overflowing for callers who pass milliseconds::max().
inline constexpr std::chrono::milliseconds kMaxTimeout{UINT32_MAX};
inline std::chrono::milliseconds clampTimeout(std::chrono::milliseconds timeout) {
  return std::clamp(timeout, std::chrono::milliseconds::zero(), kMaxTimeout);
}

// "'a', 'b' and 3 more": at most a few keys, for error messages about many ranks.
std::string describeKeys(const std::vector<std::string>& keys);

// Throws TimeoutError: "timed out after 200 ms waiting for key 'x' (of 1) in <where>".
[[noreturn]] void throwStoreTimeout(const std::string& operation,
                                    const std::vector<std::string>& missing, size_t requested,
                                    std::chrono::milliseconds timeout, const std::string& where);

}  // namespace gradsync::rendezvous
