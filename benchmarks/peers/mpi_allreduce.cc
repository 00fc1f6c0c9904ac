// Open MPI baseline for `gradsync bench allreduce` and `bench allgather`: in-place MPI_Allreduce
// of float32 sums (or MPI_Allgather of equal blocks, `--collective allgather`) over the same size
// sweep, measured by the shared method in peer_bench.h. Launch with `mpirun -np N
// peers_mpi_allreduce [--collective allgather] [--min-bytes 1M] [--max-bytes 64M] [--iters 20]
// [--json F]`.
// Exit status: 0 ok, 2 bad arguments, 3 wrong results, 1 any other error (after MPI_Abort).
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <exception>
#include <string>

#include "peer_bench.h"

namespace {

using gradsync::peers::BenchOptions;

class MpiPeer {
 public:
  explicit MpiPeer(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  void allreduceSum(std::span<float> data) {
    // MPI counts are int; refuse rather than silently truncate a huge size.
    if (data.size() > static_cast<size_t>(INT_MAX)) throw std::length_error("count > INT_MAX");
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM,
                  comm_);
  }

  // In place: rank r's block of data.size() / size elements (the sweep's sizes divide evenly).
  void allgather(std::span<float> data) {
    const size_t block = data.size() / static_cast<size_t>(size_);
    if (block * static_cast<size_t>(size_) != data.size() || block > static_cast<size_t>(INT_MAX)) {
      throw std::length_error("allgather: the size must divide into equal blocks of < 2^31");
    }
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), static_cast<int>(block),
                  MPI_FLOAT, comm_);
  }

  void barrier() { MPI_Barrier(comm_); }

  double maxOverRanks(double value) {
    double result = 0;
    MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, comm_);
    return result;
  }

  int64_t sumOverRanks(int64_t value) {
    int64_t result = 0;
    MPI_Allreduce(&value, &result, 1, MPI_INT64_T, MPI_SUM, comm_);
    return result;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

// mpirun passes `--mca NAME VALUE` to the ranks as OMPI_MCA_NAME. Without them Open MPI uses
// shared memory (btl vader) between local ranks, not TCP, and picks its allreduce algorithm per
// size; coll_tuned_allreduce_algorithm (with use_dynamic_rules) forces one.
std::string describeTransport() {
  const auto mca = [](const char* name) {
    return std::getenv(fmt::format("OMPI_MCA_{}", name).c_str());
  };
  std::string text = "openmpi ";
  if (const char* pml = mca("pml")) text += fmt::format("pml={} ", pml);
  const char* btl = mca("btl");
  text += btl ? fmt::format("btl={}", btl) : "default btl (shared memory between local ranks)";
  if (const char* algorithm = mca("coll_tuned_allreduce_algorithm")) {
    text += fmt::format(", coll_tuned_allreduce_algorithm={}", algorithm);
  }
  return text;
}

int run(int argc, char** argv, int rank) {
  BenchOptions options;
  int workers = 0;
  CLI::App app{"Open MPI MPI_Allreduce / MPI_Allgather baseline (launch with mpirun -np N)"};
  gradsync::peers::addCommonOptions(app, options);
  app.add_option("--workers", workers, "expected number of ranks (checked against mpirun -np)");
  app.add_option("--collective", options.collective, "allreduce | allgather")
      ->check(CLI::IsMember({"allreduce", "allgather"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    gradsync::peers::finishOptions(options);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : e.get_exit_code();  // Print once.
    return code == 0 ? 0 : 2;
  } catch (const std::invalid_argument& e) {
    if (rank == 0) fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  MpiPeer peer(MPI_COMM_WORLD);
  if (workers != 0 && workers != peer.size()) {
    if (rank == 0)
      fmt::print(stderr, "error: --workers {} but mpirun -np {}\n", workers, peer.size());
    return 2;
  }
  const int64_t wrong = gradsync::peers::runSweep(peer, "openmpi", describeTransport(), options);
  if (wrong != 0 && rank == 0) fmt::print(stderr, "error: {} wrong elements\n", wrong);
  return wrong == 0 ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 1;
  try {
    status = run(argc, argv, rank);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: error: {}\n", rank, e.what());
    // The other ranks may be blocked in a collective: abort them all rather than hang.
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
