// The contract of include/gradsync/transport.h, checked against every transport. Built twice:
// transport_conformance_test (loopback, TCP, TCP over TLS, shared memory with and without
// single-copy sends, and the routed transport of shared memory and TCP with two ranks per host,
// ranks as threads) and, with
// GRADSYNC_TEST_MPI, transport_conformance_mpi_test (ranks as the processes of one mpirun launch
// of >= 5).
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "gradsync/error.h"
#include "support/transports.h"
#ifdef GRADSYNC_TEST_MPI
#include "support/mpi_transport.h"
#endif

namespace gradsync::testing {
namespace {

using namespace std::chrono_literals;

class TransportConformance : public ::testing::TestWithParam<TransportKind> {
 protected:
  void run(int size, const std::function<void(Transport&)>& body, TransportOptions options = {}) {
#ifdef GRADSYNC_TEST_MPI
    if (GetParam() == TransportKind::kMpi) return runWithMpiTransport(size, body, options);
#endif
    runWithTransports(GetParam(), size, body, options);
  }
};

std::vector<uint8_t> pattern(size_t bytes, int seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 31 + seed * 7);
  return data;
}

TEST_P(TransportConformance, SendRecvSizes) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, size_t{4} << 20}) {
    run(2, [&](Transport& t) {
      int peer = 1 - t.rank();
      std::vector<uint8_t> out = pattern(bytes, t.rank());
      std::vector<uint8_t> in(bytes);
      WorkPtr send = t.send(peer, 3, out.data(), out.size());
      t.recv(peer, 3, in.data(), in.size())->wait();
      send->wait();
      EXPECT_EQ(in, pattern(bytes, peer)) << bytes << " bytes";
    });
  }
}

TEST_P(TransportConformance, MessagesWithOneTagArriveInOrder) {
  run(2, [](Transport& t) {
    constexpr int kCount = 200;
    if (t.rank() == 0) {
      std::vector<int> values(kCount);
      std::iota(values.begin(), values.end(), 0);
      std::vector<WorkPtr> works;
      for (int& v : values) works.push_back(t.send(1, 9, &v, sizeof v));
      for (auto& w : works) w->wait();
    } else {
      for (int i = 0; i < kCount; ++i) {
        int v = -1;
        t.recv(0, 9, &v, sizeof v)->wait();
        ASSERT_EQ(v, i);
      }
    }
  });
}

TEST_P(TransportConformance, TagsAreIndependentStreams) {
  run(2, [](Transport& t) {
    int a = 1, b = 2;
    if (t.rank() == 0) {
      t.send(1, 100, &a, sizeof a)->wait();
      t.send(1, 200, &b, sizeof b)->wait();
    } else {
      int got200 = 0, got100 = 0;
      t.recv(0, 200, &got200, sizeof got200)->wait();  // posted out of send order
      t.recv(0, 100, &got100, sizeof got100)->wait();
      EXPECT_EQ(got100, 1);
      EXPECT_EQ(got200, 2);
    }
  });
}

TEST_P(TransportConformance, EarlyMessageIsBufferedUntilReceivePosted) {
  run(2, [](Transport& t) {
    std::vector<uint8_t> data = pattern(100000, 5);
    if (t.rank() == 0) {
      t.send(1, 1, data.data(), data.size())->wait();
    } else {
      std::this_thread::sleep_for(100ms);
      std::vector<uint8_t> in(data.size());
      t.recv(0, 1, in.data(), in.size())->wait();
      EXPECT_EQ(in, data);
    }
  });
}

TEST_P(TransportConformance, SizeMismatchFailsTheReceive) {
  run(2, [](Transport& t) {
    std::vector<uint8_t> data(64);
    if (t.rank() == 0) {
      t.send(1, 1, data.data(), 64)->wait();
      t.send(1, 1, data.data(), 8)->wait();
    } else {
      std::vector<uint8_t> in(32);
      EXPECT_THROW(t.recv(0, 1, in.data(), 32)->wait(), ProtocolError);
      t.recv(0, 1, in.data(), 8)->wait();  // the stream goes on
    }
  });
}

TEST_P(TransportConformance, SelfSend) {
  run(1, [](Transport& t) {
    int out = 42, in = 0;
    WorkPtr recv = t.recv(0, 5, &in, sizeof in);
    t.send(0, 5, &out, sizeof out)->wait();
    recv->wait();
    EXPECT_EQ(in, 42);
  });
}

TEST_P(TransportConformance, AllPairsConcurrentlyOddWorld) {
  constexpr int kSize = 5;
  run(kSize, [](Transport& t) {
    std::vector<std::vector<uint8_t>> in(kSize), out(kSize);
    std::vector<WorkPtr> works;
    for (int peer = 0; peer < kSize; ++peer) {
      if (peer == t.rank()) continue;
      out[peer] = pattern(50000 + peer, t.rank());
      in[peer].resize(50000 + t.rank());
      works.push_back(t.recv(peer, 2, in[peer].data(), in[peer].size()));
      works.push_back(t.send(peer, 2, out[peer].data(), out[peer].size()));
    }
    for (auto& w : works) w->wait();
    for (int peer = 0; peer < kSize; ++peer) {
      if (peer != t.rank()) {
        EXPECT_EQ(in[peer], pattern(50000 + t.rank(), peer));
      }
    }
  });
}

TEST_P(TransportConformance, ReceiveTimesOutNamingThePeer) {
  TransportOptions options;
  options.timeout = 300ms;
  run(
      2,
      [](Transport& t) {
        if (t.rank() != 0) {
          std::this_thread::sleep_for(800ms);  // alive but silent past rank 0's timeout
          return;
        }
        int in = 0;
        auto start = std::chrono::steady_clock::now();
        try {
          t.recv(1, 1, &in, sizeof in)->wait();
          FAIL() << "expected a timeout";
        } catch (const TimeoutError& e) {
          EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
      },
      options);
}

TEST_P(TransportConformance, ShutdownOfPeerFailsPendingReceive) {
  run(2, [](Transport& t) {
    if (t.rank() == 1) {
      std::this_thread::sleep_for(100ms);
      return;  // the transport of rank 1 is destroyed while rank 0 waits
    }
    int in = 0;
    try {
      t.recv(1, 1, &in, sizeof in)->wait();
      FAIL() << "expected the receive to fail";
    } catch (const PeerLostError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    }
  });
}

TEST_P(TransportConformance, CountsBytesSentToPeers) {
  run(2, [](Transport& t) {
    std::vector<uint8_t> data(1000);
    uint64_t before = t.bytesSent();
    if (t.rank() == 0) {
      t.send(1, 0, data.data(), data.size())->wait();
      t.send(0, 0, data.data(), 10)->wait();  // to itself: not network traffic
      t.recv(0, 0, data.data(), 10)->wait();
      uint64_t sent = t.bytesSent() - before;
      EXPECT_GE(sent, 1000u);
      EXPECT_LE(sent, 1000u + 64);  // payload plus at most a small frame header
    } else {
      t.recv(0, 0, data.data(), data.size())->wait();
      EXPECT_EQ(t.bytesSent(), before);
    }
  });
}

TEST_P(TransportConformance, AbortFailsPendingAndLaterOperations) {
  run(2, [](Transport& t) {
    // Rank 1 stays alive (no goodbye) while rank 0 aborts. The handshake times the sleep from
    // rank 0's abort, not from rank 1's start, which under load can be far apart.
    int ready = 1;
    if (t.rank() == 1) {
      // Rank 0's abort may overtake its handshake (an abort fails everything at once, messages
      // not yet read included: seen over shared memory under TSan); rank 1 stays alive either way.
      try {
        t.recv(0, 3, &ready, sizeof ready)->wait();
      } catch (const Error&) {
      }
      std::this_thread::sleep_for(300ms);
      return;
    }
    int in = 0;
    WorkPtr pending = t.recv(1, 4, &in, sizeof in);
    t.send(1, 3, &ready, sizeof ready)->wait();
    t.abort(std::make_exception_ptr(TimeoutError("gave up")));
    EXPECT_THROW(pending->wait(), TimeoutError);  // at once, not after the timeout
    EXPECT_THROW(t.recv(1, 4, &in, sizeof in)->wait(), TimeoutError);
  });
}

// A rank that breaks because it lost another tells its peers where the failure began, so that a
// peer of a peer names the lost rank, not the one that relayed it (error.h: failureOrigin).
// Loopback ranks share no connection to relay on, and MPI aborts the whole job.
TEST_P(TransportConformance, AnAbortTellsThePeersWhereTheFailureBegan) {
  const TransportKind kind = GetParam();
  if (kind == TransportKind::kLoopback || kind == TransportKind::kMpi) {
    GTEST_SKIP() << kindName(kind) << " relays no abort";
  }
  run(3, [](Transport& t) {
    int ready = 1;
    if (t.rank() == 2) {
      std::this_thread::sleep_for(300ms);  // alive while the others fail
      return;
    }
    if (t.rank() == 1) {
      t.recv(0, 3, &ready, sizeof ready)->wait();
      t.abort(std::make_exception_ptr(
          PeerLostError("lost connection to rank 2: it was killed", {.rank = 1, .peer = 2})));
      std::this_thread::sleep_for(300ms);
      return;
    }
    int in = 0;
    WorkPtr pending = t.recv(1, 4, &in, sizeof in);
    t.send(1, 3, &ready, sizeof ready)->wait();
    try {
      pending->wait();
      FAIL() << "expected the receive to fail";
    } catch (const PeerLostError& e) {  // from rank 1, or from rank 2 relaying rank 1's abort
      EXPECT_EQ(failureOrigin(e), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("lost connection to rank 2"), std::string::npos)
          << e.what();
    }
  });
}

TEST_P(TransportConformance, InvalidPeerIsAConfigError) {
  run(2, [](Transport& t) {
    int v = 0;
    EXPECT_THROW(t.send(7, 0, &v, sizeof v), ConfigError);
    EXPECT_THROW(t.recv(-1, 0, &v, sizeof v), ConfigError);
  });
}

#ifdef GRADSYNC_TEST_MPI
INSTANTIATE_TEST_SUITE_P(Transports, TransportConformance, ::testing::Values(TransportKind::kMpi),
                         [](const auto& info) { return kindName(info.param); });
#else
INSTANTIATE_TEST_SUITE_P(Transports, TransportConformance,
                         ::testing::Values(TransportKind::kLoopback, TransportKind::kTcp,
                                           TransportKind::kTcpTls, TransportKind::kShm,
                                           TransportKind::kShmCopy, TransportKind::kRouted),
                         [](const auto& info) { return kindName(info.param); });
#endif

}  // namespace
}  // namespace gradsync::testing
