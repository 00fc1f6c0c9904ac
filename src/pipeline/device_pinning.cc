#include "pipeline/device_pinning.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"

#ifdef __linux__
#include <sched.h>
#endif

namespace gradsync {
namespace {

#ifdef __linux__
bool setThreadCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      errno = EINVAL;
      return false;
    }
    CPU_SET(cpu, &set);
  }
  return sched_setaffinity(0, sizeof(set), &set) == 0;  // 0: the calling thread
}
#endif

}  // namespace

std::vector<int> threadCpus() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    throw SystemError(fmt::format("cannot read this thread's CPUs: {}", std::strerror(errno)),
                      {.operation = "sched_getaffinity"});
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
#else
  return {0};
#endif
}

ThreadPin::ThreadPin(int cpu, int rank) {
#ifdef __linux__
  previous_ = threadCpus();
  if (!setThreadCpus({cpu})) {
    throw ConfigError(
        fmt::format("rank {} cannot pin itself to core {}: {}", rank, cpu, std::strerror(errno)),
        {.rank = rank,
         .operation = "sched_setaffinity",
         .hint = fmt::format("device d runs on the (d mod n)-th of the n CPUs the job may use "
                             "({} here); check the cpuset (taskset -p, cgroups)",
                             previous_.size())});
  }
#else
  throw ConfigError(fmt::format("rank {} cannot pin itself to core {}: no sched_setaffinity on "
                                "this system",
                                rank, cpu),
                    {.rank = rank, .hint = "pinned pipelines (--waves, --pin-devices) need Linux"});
#endif
}

ThreadPin::~ThreadPin() {
#ifdef __linux__
  if (!setThreadCpus(previous_)) {
    GS_LOG(kWarn, "could not give the thread its CPUs back: {}", std::strerror(errno));
  }
#endif
}

}  // namespace gradsync
