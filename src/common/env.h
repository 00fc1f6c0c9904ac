// Every environment variable gradsync reads, read in this one place (docs/cli.md lists them).
// Nothing else in the library calls getenv: code receives an Env (or values derived from it).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/logging.h"
#include "common/simd.h"

namespace gradsync {

struct Env {
  // GRADSYNC_LOG_LEVEL: error|warn|info|debug|trace. Default warn.
  LogLevel logLevel = LogLevel::kWarn;

  // Rank and world size, from the first launcher whose variables are present:
  //   torchrun style: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (also set by
  //                   `gradsync launch`);
  //   Open MPI:       OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
  //                   OMPI_COMM_WORLD_LOCAL_SIZE.
  std::optional<int> rank;
  std::optional<int> worldSize;
  std::optional<int> localRank;
  std::optional<int> localSize;
  std::string launcher;  // "env", "mpirun" or "" when no launcher variables are set

  // MASTER_ADDR, MASTER_PORT: where rank 0 serves the rendezvous store. GRADSYNC_MASTER_PORT
  // overrides MASTER_PORT, for programs whose torch.distributed store holds MASTER_PORT itself;
  // under torchrun's static rendezvous (TORCHELASTIC_USE_AGENT_STORE=True: its agent serves
  // MASTER_PORT) gradsync's store takes MASTER_PORT + 1 unless GRADSYNC_MASTER_PORT says.
  std::string masterAddr;
  std::optional<int> masterPort;
  std::string masterPortFrom = "MASTER_PORT";  // where masterPort came from, for messages

  // GRADSYNC_JOB_ID: a name shared by every process of one job (default: "gradsync").
  std::string jobId;
  // GRADSYNC_JOB_TOKEN: a shared secret for the job; peers presenting another are refused.
  // Under mpirun without it, Open MPI's job id (OMPI_MCA_ess_base_jobid) is used instead.
  std::string jobToken;

  // GRADSYNC_TLS: 1 = TLS on every link between ranks, as --tls (TcpTransportOptions::tls).
  bool tls = false;

  // GRADSYNC_RANKS_PER_HOST: consecutive runs of N ranks form a host (--ranks-per-host; set by
  // `gradsync launch --ranks-per-host N` for its processes).
  std::optional<int> ranksPerHost;
  // GRADSYNC_SHM: 0 = TCP between the ranks of one host too (--shm off). Default 1.
  bool sharedMemory = true;

  // GRADSYNC_TIMEOUT: seconds any wait may last before it fails (default 60).
  std::optional<double> timeoutSeconds;

  // GRADSYNC_EXTERNAL_STORE: 1 = the rendezvous store at MASTER_ADDR:MASTER_PORT is served
  // outside the job's processes (`gradsync launch --elastic` serves it), so rank 0 does not.
  bool externalStore = false;
  // GRADSYNC_RESTART_COUNT: how often the launcher restarted this process's slot (0: never).
  int restartCount = 0;

  // GRADSYNC_SIMD: scalar|avx2|avx512, the widest instruction set the element-wise kernels may
  // use (common/simd.h; default: the CPU's widest). Every path gives the same bits.
  std::optional<simd::Path> simd;

  // Reads the process environment.
  static Env fromProcess();
  // Reads the given variables (tests). Throws ConfigError on malformed values.
  static Env fromMap(const std::map<std::string, std::string>& vars);
};

}  // namespace gradsync
