// The process-wide MPI library: initialised once, finalised at exit, and a lock serialising
// every MPI call. MPI itself is global state of the process (one MPI_Init per process), which is
// why this is the one singleton of gradsync; everything else receives what it needs.
#pragma once

#include <mpi.h>

#include <mutex>

namespace gradsync::mpi {

class Runtime {
 public:
  // Initialises MPI on first use with at least MPI_THREAD_SERIALIZED (every MPI call of gradsync
  // holds lock(), so no more is needed). Throws ConfigError if MPI cannot give that, SystemError
  // if MPI_Init_thread fails.
  static Runtime& instance();

  std::mutex& lock() { return lock_; }

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  Runtime();
  ~Runtime();  // MPI_Finalize, unless the application initialised MPI itself

  std::mutex lock_;
  bool ownsMpi_ = false;
};

// Throws SystemError naming the call and MPI's error text unless code is MPI_SUCCESS.
void check(int code, const char* call);

}  // namespace gradsync::mpi
