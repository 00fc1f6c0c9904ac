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

// Loads `bytes` (a module's saved archive) into `module`, keeping every parameter's storage:
// Module::load points each parameter at new storage (Tensor::set_), while the gradient engine
// updates parameters through their storage (p3, sharded), so the values are copied back into the
// original storage. DataError naming `what` if the bytes do not load.
inline void loadModuleInPlace(torch::nn::Module& module, const std::vector<uint8_t>& bytes,
                              const std::string& what) {
  std::vector<torch::Tensor> storage;
  for (const torch::Tensor& p : module.parameters()) storage.push_back(p.detach());
  loadArchiveBytes(bytes, what, [&](auto& archive) { module.load(archive); });
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> parameters = module.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    storage[i].copy_(parameters[i]);
    parameters[i].set_(storage[i]);
  }
}

}  // namespace gradsync
