#include "torch/models/gpt_config.h"

#include <fmt/format.h>

#include <sstream>

#include "common/units.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr const char* kGptForm = "gpt[:layers=L,width=D,heads=A,context=T]";

int positiveOption(const std::string& key, const std::string& value) {
  const int64_t parsed = parseInteger(value, "gpt's " + key);
  if (parsed < 1 || parsed > 1 << 20) {
    throw ConfigError(fmt::format("gpt's {} must be a positive integer, not {}", key, value),
                      {.hint = kGptForm});
  }
  return static_cast<int>(parsed);
}

}  // namespace

std::string GptConfig::spec() const {
  return fmt::format("gpt:layers={},width={},heads={},context={}", layers, width, heads, context);
}

std::optional<GptConfig> parseGptModel(const std::string& model) {
  if (model != "gpt" && model.rfind("gpt:", 0) != 0) return std::nullopt;
  GptConfig config;
  for (const auto& [option, key, value, hasValue] :
       splitOptions(model.size() > 4 ? model.substr(4) : "")) {
    if (key == "layers") {
      config.layers = positiveOption(key, value);
    } else if (key == "width") {
      config.width = positiveOption(key, value);
    } else if (key == "heads") {
      config.heads = positiveOption(key, value);
    } else if (key == "context") {
      config.context = positiveOption(key, value);
    } else {
      throw ConfigError(fmt::format("unknown gpt option '{}' in '{}'", option, model),
                        {.hint = kGptForm});
    }
  }
  if (config.width % config.heads != 0) {
    throw ConfigError(
        fmt::format("gpt's heads ({}) must divide its width ({})", config.heads, config.width),
        {.hint = kGptForm});
  }
  return config;
}

size_t gptContextOf(const std::string& model) {
  const std::optional<GptConfig> config = parseGptModel(model);
  return config ? static_cast<size_t>(config->context) : 0;
}

}  // namespace gradsync
