// Feeds arbitrary text to the model-profile JSON parser (sim/model_profile.h), as a broken or
// hand-edited `--model-profile file.json` would. It must throw ConfigError and nothing else (no
// nlohmann exception escaping, no crash, no undefined behaviour), and a profile it accepts must
// come back unchanged through profileToJson.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gradsync/error.h"
#include "sim/model_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  gradsync::ModelProfile profile;
  try {
    profile = gradsync::profileFromJson(text, "fuzz");
  } catch (const gradsync::ConfigError&) {
    return 0;
  }
  if (profile.batchSize <= 0 || profile.parameterCount() == 0) std::abort();
  // What was accepted is written back and read again to the same profile (the CLI's
  // `gradsync profile` writes files that `--model-profile` reads).
  const std::string again = gradsync::profileToJson(profile);
  if (gradsync::profileToJson(gradsync::profileFromJson(again, "fuzz, written back")) != again) {
    std::abort();
  }
  return 0;
}
