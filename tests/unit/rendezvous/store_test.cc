// The Store contract, run against every implementation: in-memory, file (temporary directory)
// and TCP (a server on a free port). `peer()` is a second handle on the same store, as another
// process would have one.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include "gradsync/error.h"
#include "gradsync/store.h"
#include "rendezvous/tcp_store.h"
#include "support/rank_threads.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using MonotonicClock = std::chrono::steady_clock;

enum class Kind { kInMemory, kFile, kTcp };

std::string kindName(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kInMemory:
      return "InMemory";
    case Kind::kFile:
      return "File";
    case Kind::kTcp:
      return "Tcp";
  }
  return "Unknown";
}

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::kInMemory:
        store_ = makeInMemoryStore();
        break;
      case Kind::kFile: {
        std::string pattern = (std::filesystem::temp_directory_path() / "gs-store-XXXXXX").string();
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
        store_ = makeFileStore(dir_ + "/store");
        break;
      }
      case Kind::kTcp:
        options_.jobToken = "test-token";
        server_ = std::make_unique<TcpStoreServer>(SocketAddress{"127.0.0.1", 0}, options_);
        store_ = makeTcpStoreClient(server_->address(), options_);
        break;
    }
  }

  void TearDown() override {
    store_.reset();
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::shared_ptr<Store> peer() {
    switch (GetParam()) {
      case Kind::kInMemory:
        return store_;
      case Kind::kFile:
        return makeFileStore(dir_ + "/store");
      case Kind::kTcp:
        return makeTcpStoreClient(server_->address(), options_);
    }
    return nullptr;
  }

  std::shared_ptr<Store> store_;
  std::string dir_;
  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
};

Bytes patternBytes(size_t size) {
  Bytes out(size);
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>((i * 131 + i / 256) & 0xff);
  return out;
}

TEST_P(StoreTest, SetThenGetFromBothHandles) {
  store_->set("a", Bytes{1, 2, 3});
  EXPECT_EQ(store_->get("a", 1s), (Bytes{1, 2, 3}));
  EXPECT_EQ(peer()->get("a", 1s), (Bytes{1, 2, 3}));
}

TEST_P(StoreTest, SetReplacesTheValue) {
  store_->setString("k", "first");
  peer()->setString("k", "second, longer");
  EXPECT_EQ(store_->getString("k", 1s), "second, longer");
}

TEST_P(StoreTest, GetWaitsForALaterSetFromAnotherThread) {
  // The same handle from two threads (thread safety), then a second handle.
  for (bool samehandle : {true, false}) {
    std::string key = samehandle ? "late-same" : "late-peer";
    auto setter = samehandle ? store_ : peer();
    auto start = MonotonicClock::now();
    std::thread thread([&] {
      std::this_thread::sleep_for(50ms);
      setter->setString(key, "here");
    });
    EXPECT_EQ(store_->getString(key, 5s), "here");
    EXPECT_GE(MonotonicClock::now() - start, 40ms);
    thread.join();
  }
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  auto start = MonotonicClock::now();
  try {
    store_->get("nobody-sets-this", 200ms);
    FAIL() << "get did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("nobody-sets-this"), std::string::npos) << e.what();
  }
  auto elapsed = MonotonicClock::now() - start;
  EXPECT_GE(elapsed, 190ms);
  EXPECT_LT(elapsed, 1500ms);
  // The store still works afterwards.
  store_->setString("after", "ok");
  EXPECT_EQ(store_->getString("after", 1s), "ok");
}

TEST_P(StoreTest, AddIsAtomicUnderConcurrentThreads) {
  constexpr int kThreads = 8;
  constexpr int kAddsEach = 25;
  std::vector<std::shared_ptr<Store>> handles;
  for (int i = 0; i < kThreads; ++i) handles.push_back(i % 2 == 0 ? store_ : peer());
  std::vector<std::vector<int64_t>> seen(kThreads);
  testing::runRankThreads(kThreads, [&](int rank) {
    for (int i = 0; i < kAddsEach; ++i) seen[rank].push_back(handles[rank]->add("counter", 1));
  });
  std::vector<int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < kThreads * kAddsEach; ++i)
    ASSERT_EQ(all[i], i + 1) << "lost or duplicate add";
  EXPECT_EQ(store_->add("counter", 0), kThreads * kAddsEach);
  EXPECT_EQ(store_->getString("counter", 1s), std::to_string(kThreads * kAddsEach));
}

TEST_P(StoreTest, AddStartsFromZeroAndAcceptsNegativeDeltas) {
  EXPECT_EQ(store_->add("c", 5), 5);
  EXPECT_EQ(peer()->add("c", -7), -2);
  EXPECT_EQ(store_->getString("c", 1s), "-2");
}

TEST_P(StoreTest, AddOnANonIntegerValueIsAProtocolError) {
  store_->setString("text", "hello");
  EXPECT_THROW(store_->add("text", 1), ProtocolError);
  EXPECT_EQ(store_->add("number", 2), 2);  // still usable
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyIsSet) {
  std::vector<std::string> keys = {"w0", "w1", "w2", "w3"};
  std::thread thread([&, other = peer()] {
    for (const auto& key : keys) {
      std::this_thread::sleep_for(10ms);
      other->setString(key, key);
    }
  });
  store_->wait(keys, 5s);
  for (const auto& key : keys) EXPECT_EQ(store_->getString(key, 0ms), key);
  thread.join();
  store_->wait({}, 0ms);  // nothing to wait for
}

TEST_P(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  store_->setString("present", "1");
  try {
    store_->wait({"present", "absent-1", "absent-2"}, 200ms);
    FAIL() << "wait did not time out";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'absent-1'"), std::string::npos) << what;
    EXPECT_NE(what.find("'absent-2'"), std::string::npos) << what;
    EXPECT_EQ(what.find("'present'"), std::string::npos) << what;
  }
}

TEST_P(StoreTest, BinaryValuesKeepZeroBytes) {
  Bytes value = {0, 0, 1, 0, 255, 0, 'x', 0};
  store_->set("bin", value);
  EXPECT_EQ(peer()->get("bin", 1s), value);
}

TEST_P(StoreTest, EmptyValueCountsAsSet) {
  store_->set("empty", Bytes{});
  EXPECT_EQ(peer()->get("empty", 1s), Bytes{});
  store_->wait({"empty"}, 1s);
}

TEST_P(StoreTest, LargeValueOfOneMebibyte) {
  Bytes value = patternBytes(1 << 20);
  store_->set("large", value);
  EXPECT_EQ(peer()->get("large", 5s), value);
}

TEST_P(StoreTest, UnusualKeysAreDistinct) {
  std::vector<std::string> keys = {"",
                                   ".",
                                   "..",
                                   "a/b",
                                   "a%2Fb",
                                   "with space",
                                   "ünïcode",
                                   "new\nline",
                                   std::string(1000, 'k'),
                                   std::string(999, 'k') + "j"};
  for (size_t i = 0; i < keys.size(); ++i) store_->setString(keys[i], std::to_string(i));
  auto other = peer();
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(other->getString(keys[i], 1s), std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest,
                         ::testing::Values(Kind::kInMemory, Kind::kFile, Kind::kTcp), kindName);

}  // namespace
}  // namespace gradsync
