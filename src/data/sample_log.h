// --record-samples DIR: the dataset indices a worker trains on at each step, one line per step, so
// that a test (or a user) can check that an elastic run used every sample of an epoch exactly once
// (tests/e2e/elastic_test.cc does, with the run's rounds from --metrics). Torch-free.
//
// File DIR/worker-SLOT-RESTART.txt, one per process: a header line "# NAME, WHERE", then per step
// "ROUND STEP EPOCH RANK SIZE INDEX..." (STEP the global step, EPOCH 0-based, RANK of SIZE in
// ROUND). Each line is one write(2), made before the step's gradients leave this process: a
// worker killed afterwards still has the line of every step its gradients took part in.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/socket.h"

namespace gradsync {

class SampleLog {
 public:
  // Creates the directory if needed and the file (replacing an older one). SystemError naming the
  // path if it cannot.
  SampleLog(const std::string& directory, int slot, int restart, const std::string& header);
  const std::string& path() const { return path_; }

  void record(int64_t round, int64_t step, int64_t epoch, int rank, int size,
              std::span<const size_t> indices);

 private:
  void writeLine(const std::string& line);

  std::string path_;
  Fd fd_;
};

}  // namespace gradsync
