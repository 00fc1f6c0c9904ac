// torch::serialize archives as bytes, for checkpoint sections and the synchronization state.
#pragma once

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {

// The bytes of an archive that save(archive) filled.
template <typename Save>
std::vector<uint8_t> archiveBytes(Save&& save) {
  torch::serialize::OutputArchive archive;
  save(archive);
  std::ostringstream out;
  archive.save_to(out);
  const std::string text = out.str();
  return {text.begin(), text.end()};
}

// Reads `bytes` as an archive and calls load(archive); a torch error becomes a DataError saying
// that `what` cannot be loaded.
template <typename Load>
void loadArchiveBytes(const std::vector<uint8_t>& bytes, const std::string& what, Load&& load) {
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(in);
    load(archive);
  } catch (const c10::Error& e) {
    throw DataError(fmt::format("{} cannot be loaded: {}", what, e.what_without_backtrace()));
  }
}

}  // namespace gradsync
