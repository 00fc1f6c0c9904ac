// Pinning a pipeline rank's training thread to the core of its device (pipeline/wave_placement.h
// gives the core). Linux (sched_setaffinity); elsewhere pinning throws ConfigError. Torch-free.
#pragma once

#include <vector>

namespace gradsync {

// The CPUs the calling thread may run on (sched_getaffinity), ascending. Throws SystemError if
// the mask cannot be read.
std::vector<int> threadCpus();

// Pins the calling thread to one CPU while it lives and gives the thread its previous CPUs back
// when destroyed (rank threads of one process, and the test that ran them, go on unpinned).
// Threads the pinned thread starts inherit the pin; threads started before (the transport's)
// keep their own CPUs. Must be destroyed on the thread that made it. Not thread-safe.
class ThreadPin {
 public:
  // Throws ConfigError naming `rank` and `cpu` when the thread cannot be pinned (a CPU outside
  // the process's cpuset, or no sched_setaffinity on this system).
  ThreadPin(int cpu, int rank);
  ~ThreadPin();
  ThreadPin(const ThreadPin&) = delete;
  ThreadPin& operator=(const ThreadPin&) = delete;

 private:
  std::vector<int> previous_;
};

}  // namespace gradsync
