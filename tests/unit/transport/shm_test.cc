// Shared-memory-only behaviour (the contract is in tests/conformance): rings smaller than the
// messages, the segments' names removed once connected, stale names swept, and the routed
// transport of shared memory and TCP: routes per peer, a failure on one route breaking the other,
// and ranks that disagree on --ranks-per-host refused at rendezvous.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <numeric>
#include <thread>

#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/loopback.h"
#include "gradsync/store.h"
#include "gradsync/topology.h"
#include "job/host_transport.h"
#include "support/rank_threads.h"
#include "transport/routed_transport.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_transport.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::vector<uint8_t> pattern(size_t bytes, int seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 13 + seed);
  return data;
}

// Names in /dev/shm created by this process.
std::vector<std::string> ownSegments() {
  std::vector<std::string> names;
  const std::string prefix = "gradsync-" + std::to_string(::getpid()) + "-";
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    std::string name = entry.path().filename().string();
    if (name.starts_with(prefix)) names.push_back(name);
  }
  return names;
}

void runShm(int size, const ShmTransportOptions& options,
            const std::function<void(Transport&)>& body) {
  auto store = makeInMemoryStore();
  std::vector<int> everyone(size);
  std::iota(everyone.begin(), everyone.end(), 0);
  testing::runRankThreads(size, [&](int rank) {
    auto transport = connectShmTransport(*store, rank, size, everyone, options);
    body(*transport);
  });
}

// A ring of 8 KiB carries messages of 1 MiB: the writer stops when it is full and the reader
// wakes it when it has made room, in both directions at once.
TEST(Shm, MessagesLargerThanTheRingStream) {
  for (size_t singleCopy : {size_t{0}, size_t{64} << 10}) {
    ShmTransportOptions options{.ringBytes = 8192, .singleCopyMinBytes = singleCopy};
    runShm(3, options, [](Transport& t) {
      const int right = (t.rank() + 1) % 3, left = (t.rank() + 2) % 3;
      for (size_t bytes : {size_t{8191}, size_t{8192}, size_t{100'003}, size_t{1} << 20}) {
        std::vector<uint8_t> out = pattern(bytes, t.rank()), in(bytes);
        WorkPtr send = t.send(right, 7, out.data(), out.size());
        t.recv(left, 7, in.data(), in.size())->wait();
        send->wait();
        ASSERT_EQ(in, pattern(bytes, left)) << bytes << " bytes";
      }
    });
  }
}

TEST(Shm, SegmentsLeaveNoNameBehindOnceConnected) {
  runShm(3, {}, [](Transport& t) {
    barrier(t);  // every rank has returned from connecting, so has unlinked its name
    EXPECT_EQ(ownSegments(), std::vector<std::string>{}) << "rank " << t.rank();
  });
  EXPECT_EQ(ownSegments(), std::vector<std::string>{});
}

TEST(Shm, RanksOfOtherHostsAreRefused) {
  auto store = makeInMemoryStore();
  testing::runRankThreads(2, [&](int rank) {
    auto transport = connectShmTransport(*store, rank, 3, {0, 1}, {});
    int v = 0;
    EXPECT_THROW(transport->send(2, 0, &v, sizeof v), ConfigError);
    EXPECT_THROW(transport->recv(2, 0, &v, sizeof v), ConfigError);
  });
}

// A crash between creating a segment and unlinking it leaves a name: the next creation removes
// names whose creator is gone (here a child that exited), and keeps those of live processes.
TEST(Shm, NamesOfDeadCreatorsAreSwept) {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = "/gradsync-" + std::to_string(child) + "-0-test";
  const std::string alive = "/gradsync-" + std::to_string(::getpid()) + "-0-test";
  for (const std::string& name : {dead, alive}) {
    int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  EXPECT_GE(shm::removeStaleSegments(/*minAgeSeconds=*/0), 1);
  EXPECT_FALSE(fs::exists("/dev/shm" + dead));
  EXPECT_TRUE(fs::exists("/dev/shm" + alive));
  ::shm_unlink(alive.c_str());
}

HostTransportOptions hostOptions(int ranksPerHost, std::chrono::milliseconds timeout = 10s) {
  HostTransportOptions options{.ranksPerHost = ranksPerHost};
  options.tcp.jobToken = "test";
  options.tcp.transport.timeout = timeout;
  return options;
}

// Two ranks per host: shared memory inside a host, TCP between hosts, the topology attached.
TEST(Routed, RoutesFollowTheHosts) {
  auto store = makeInMemoryStore();
  testing::runRankThreads(4, [&](int rank) {
    auto transport = connectHostTransport(*store, rank, 4, hostOptions(2));
    auto& routed = dynamic_cast<RoutedTransport&>(*transport);
    ASSERT_NE(routed.topology(), nullptr);
    EXPECT_EQ(*routed.topology(), Topology::uniform(4, 2));
    const int mate = rank ^ 1;
    EXPECT_NE(&routed.routeTo(mate), &routed.routeTo(rank ^ 2));
    std::vector<int> in(4, -1);
    std::vector<WorkPtr> works;
    for (int peer = 0; peer < 4; ++peer) {
      works.push_back(transport->send(peer, 1, &rank, sizeof rank));
      works.push_back(transport->recv(peer, 1, &in[peer], sizeof(int)));
    }
    for (auto& work : works) work->wait();
    EXPECT_EQ(in, (std::vector<int>{0, 1, 2, 3}));
  });
}

// Rank 3 breaks; rank 0 hears it over TCP, and its receive from rank 1, pending on shared
// memory, fails at once naming rank 3 instead of timing out.
TEST(Routed, AFailureOnOneRouteBreaksTheOthers) {
  auto store = makeInMemoryStore();
  testing::runRankThreads(4, [&](int rank) {
    auto transport = connectHostTransport(*store, rank, 4, hostOptions(2, 20s));
    int in = 0;
    if (rank == 3) {
      transport->abort(std::make_exception_ptr(ProtocolError("rank 3 gave up")));
      return;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      transport->recv(rank ^ 1, 5, &in, sizeof in)->wait();
      FAIL() << "rank " << rank << ": the receive should fail";
    } catch (const PeerLostError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  });
}

// A route that breaks before the routed transport attaches the others (rank 3 gave up while
// its peers were still connecting their shared memory) aborts each of them as it is attached:
// a receive on one then fails at once instead of waiting out the timeout (seen under TSan in
// AFailureOnOneRouteBreaksTheOthers, whose ranks 0 and 1 waited 20 s).
TEST(Routed, ARouteBrokenBeforeTheOthersAttachAbortsThemAsTheyAttach) {
  auto relay = std::make_shared<BreakRelay>();
  BreakRelay::callbackOf(relay)(
      std::make_exception_ptr(PeerLostError("rank 3 gave up while the others connected")));
  LoopbackFabric fabric(2, {.timeout = std::chrono::seconds(5)});
  auto transport = fabric.connect(0);
  relay->attach(transport.get());
  int in = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    transport->recv(1, 5, &in, sizeof in)->wait();
    FAIL() << "the receive should fail";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3 gave up"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  relay->detach();
}

TEST(Routed, RanksThatDisagreeOnTheHostsAreRefused) {
  auto store = makeInMemoryStore();
  testing::runRankThreads(3, [&](int rank) {
    try {
      connectHostTransport(*store, rank, 3, hostOptions(rank == 2 ? 1 : 3, 5s));
      FAIL() << "rank " << rank << " should refuse";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace gradsync
