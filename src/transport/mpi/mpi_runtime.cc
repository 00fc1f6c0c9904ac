#include "transport/mpi/mpi_runtime.h"

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync::mpi {

Runtime& Runtime::instance() {
  static Runtime runtime;  // thread-safe initialisation; destroyed (finalised) at exit
  return runtime;
}

Runtime::Runtime() {
  int initialised = 0;
  check(MPI_Initialized(&initialised), "MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (initialised) {
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
  } else {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    ownsMpi_ = true;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw ConfigError(
        fmt::format("MPI provides thread level {}, below MPI_THREAD_SERIALIZED", provided),
        {.operation = "mpi init",
         .hint = "the MPI transport runs MPI on a progress thread; initialise MPI with "
                 "MPI_Init_thread(MPI_THREAD_SERIALIZED) or let gradsync do it"});
  }
  // Errors come back as codes (then SystemError) instead of aborting the job without a word.
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

Runtime::~Runtime() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (ownsMpi_ && !finalised) MPI_Finalize();
}

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw SystemError(fmt::format("{} failed: {}", call, std::string(text, length)),
                    {.operation = "mpi"});
}

}  // namespace gradsync::mpi
