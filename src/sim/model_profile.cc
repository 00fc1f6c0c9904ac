#include "sim/model_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>
#include <vector>

#include "gradsync/error.h"

namespace gradsync {

std::vector<TensorShape> ModelProfile::tensors() const {
  std::vector<TensorShape> all;
  for (const LayerProfile& layer : layers)
    all.insert(all.end(), layer.tensors.begin(), layer.tensors.end());
  return all;
}

size_t ModelProfile::parameterCount() const {
  size_t count = 0;
  for (const LayerProfile& layer : layers)
    for (const TensorShape& tensor : layer.tensors) count += tensor.elements;
  return count;
}

double ModelProfile::forwardSeconds() const {
  double sum = 0;
  for (const LayerProfile& layer : layers) sum += layer.forwardSeconds;
  return sum;
}

double ModelProfile::backwardSeconds() const {
  double sum = 0;
  for (const LayerProfile& layer : layers) sum += layer.backwardSeconds;
  return sum;
}

void scaleComputeTimes(ModelProfile& profile, double factor) {
  if (!(factor > 0))
    throw ConfigError(fmt::format("--compute-scale must be positive, not {}", factor));
  for (LayerProfile& layer : profile.layers) {
    layer.forwardSeconds *= factor;
    layer.backwardSeconds *= factor;
  }
  profile.updateSeconds *= factor;
}

std::string profileToJson(const ModelProfile& profile) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerProfile& layer : profile.layers) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const TensorShape& tensor : layer.tensors)
      tensors.push_back({{"name", tensor.name}, {"dims", tensor.dims}});
    nlohmann::json out = {{"name", layer.name},
                          {"forward_s", layer.forwardSeconds},
                          {"backward_s", layer.backwardSeconds},
                          {"tensors", tensors}};
    if (!layer.kind.empty()) out["kind"] = layer.kind;
    if (layer.activationBytesPerSample > 0)
      out["activation_bytes"] = layer.activationBytesPerSample;
    layers.push_back(std::move(out));
  }
  nlohmann::json out = {{"name", profile.name},
                        {"device", profile.device},
                        {"source", profile.source},
                        {"codecs_on_cpu", profile.codecsOnCpu},
                        {"batch_size", profile.batchSize},
                        {"update_s", profile.updateSeconds},
                        {"layers", layers}};
  return out.dump(1);
}

namespace {

// Whether `value` holds a T without a lossy conversion: nlohmann converts a float such as 1e32
// to int64_t by a cast that is undefined out of range, so integers must be JSON integers.
template <typename T>
bool holds(const nlohmann::json& value) {
  if constexpr (std::is_same_v<T, int64_t>) {
    return value.is_number_integer();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    return value.is_array() &&
           std::all_of(value.begin(), value.end(), [](const auto& v) { return holds<int64_t>(v); });
  } else {
    return true;  // the conversion itself checks
  }
}

// Reads a field of `object`, naming it and the profile when it is missing or of the wrong type.
template <typename T>
T field(const nlohmann::json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key))
    throw ConfigError(fmt::format("model profile {}: missing field \"{}\"", where, key));
  try {
    if (holds<T>(object.at(key))) return object.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
  }
  throw ConfigError(fmt::format("model profile {}: field \"{}\" has the wrong type", where, key));
}

double nonNegative(const nlohmann::json& object, const char* key, const std::string& where) {
  const auto value = field<double>(object, key, where);
  if (!(value >= 0))
    throw ConfigError(
        fmt::format("model profile {}: \"{}\" must be >= 0, not {}", where, key, value));
  return value;
}

LayerProfile layerFromJson(const nlohmann::json& json, const std::string& where) {
  LayerProfile layer;
  layer.name = field<std::string>(json, "name", where);
  const std::string at = fmt::format("{}, layer \"{}\"", where, layer.name);
  layer.forwardSeconds = nonNegative(json, "forward_s", at);
  layer.backwardSeconds = nonNegative(json, "backward_s", at);
  if (json.contains("kind")) layer.kind = field<std::string>(json, "kind", at);
  if (json.contains("activation_bytes"))
    layer.activationBytesPerSample = nonNegative(json, "activation_bytes", at);
  if (!layer.kind.empty() && layer.kind != kLinearLayer) {
    throw ConfigError(fmt::format("model profile {}: unknown kind \"{}\" (only \"{}\")", at,
                                  layer.kind, kLinearLayer));
  }
  for (const nlohmann::json& tensor : field<nlohmann::json>(json, "tensors", at)) {
    auto dims = field<std::vector<int64_t>>(tensor, "dims", at);
    for (int64_t d : dims)
      if (d <= 0)
        throw ConfigError(fmt::format("model profile {}: a tensor has a dimension {}", at, d));
    layer.tensors.push_back(tensorShape(field<std::string>(tensor, "name", at), std::move(dims)));
  }
  const auto& t = layer.tensors;
  const bool linearShapes = !t.empty() && t.size() <= 2 && t[0].dims.size() == 2 &&
                            (t.size() == 1 || t[1].dims == std::vector<int64_t>{t[0].dims[0]});
  if (layer.kind == kLinearLayer && !linearShapes) {
    throw ConfigError(
        fmt::format("model profile {}: a linear layer has a weight (out x in) and "
                    "at most a bias (out)",
                    at));
  }
  return layer;
}

}  // namespace

ModelProfile profileFromJson(const std::string& text, const std::string& origin) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // also a number out of range
    throw ConfigError(fmt::format("model profile {}: not valid JSON ({})", origin, e.what()));
  }
  ModelProfile profile;
  profile.name = field<std::string>(json, "name", origin);
  profile.device = field<std::string>(json, "device", origin);
  profile.source = json.contains("source") ? field<std::string>(json, "source", origin) : "";
  profile.codecsOnCpu = json.contains("codecs_on_cpu")
                            ? field<bool>(json, "codecs_on_cpu", origin)
                            : profile.source.starts_with("gradsync profile");
  profile.batchSize = field<int64_t>(json, "batch_size", origin);
  if (profile.batchSize <= 0)
    throw ConfigError(fmt::format("model profile {}: batch_size must be positive", origin));
  profile.updateSeconds = json.contains("update_s") ? nonNegative(json, "update_s", origin) : 0.0;
  for (const nlohmann::json& layer : field<nlohmann::json>(json, "layers", origin))
    profile.layers.push_back(layerFromJson(layer, origin));
  if (profile.parameterCount() == 0)
    throw ConfigError(fmt::format("model profile {}: no layer has parameters", origin));
  return profile;
}

ModelProfile loadModelProfile(const std::string& nameOrPath) {
  for (const std::string& name : builtinProfileNames())
    if (name == nameOrPath) return builtinProfile(name);
  std::ifstream in(nameOrPath);
  if (!in)
    throw ConfigError(
        fmt::format("--model-profile {}: neither a built-in profile ({}) nor a readable file",
                    nameOrPath, fmt::join(builtinProfileNames(), ", ")));
  std::stringstream text;
  text << in.rdbuf();
  return profileFromJson(text.str(), nameOrPath);
}

}  // namespace gradsync
