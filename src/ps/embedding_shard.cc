#include "ps/embedding_shard.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/random.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr int kFormat = 1;

template <typename T>
std::vector<uint8_t> bytesOf(std::span<const T> values) {
  std::vector<uint8_t> bytes(values.size_bytes());
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
std::vector<T> valuesOf(const std::vector<uint8_t>& bytes, const std::string& path,
                        const char* section) {
  if (bytes.size() % sizeof(T) != 0) {
    throw DataError(
        fmt::format("embedding checkpoint '{}': section \"{}\" holds {} bytes, not a "
                    "whole number of values",
                    path, section, bytes.size()));
  }
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

std::string optimizerName(const UpdateRule& rule) {
  return rule.kind == UpdateRule::Kind::kAdagrad ? "adagrad" : "sgd";
}

}  // namespace

uint64_t EmbeddingSpec::rowsOn(int table, int shard) const {
  const uint64_t rows = tableRows[static_cast<size_t>(table)];
  const auto s = static_cast<uint64_t>(shard);
  const auto n = static_cast<uint64_t>(shards);
  return rows > s ? (rows - s + n - 1) / n : 0;
}

void validateEmbeddingSpec(const EmbeddingSpec& spec) {
  if (spec.tableRows.empty()) throw ConfigError("an embedding needs at least one table");
  for (size_t t = 0; t < spec.tableRows.size(); ++t) {
    if (spec.tableRows[t] == 0 || spec.tableRows[t] >= (uint64_t{1} << kRowKeyBits)) {
      throw ConfigError(
          fmt::format("embedding table {} has {} rows (1 to 2^40 - 1)", t, spec.tableRows[t]));
    }
  }
  if (spec.dim < 1) throw ConfigError("--embedding-dim must be at least 1");
  if (spec.shards < 1) throw ConfigError("an embedding needs at least one shard");
}

void initialRow(const EmbeddingSpec& spec, int table, uint64_t row, std::span<float> out) {
  const double bound = std::sqrt(1.0 / static_cast<double>(spec.tableRows[table]));
  uint64_t state = rng::mixSeed(rng::mixSeed(spec.seed, 0xe3b + table), row);
  for (float& value : out) {
    state = rng::splitMix64(state);
    value = static_cast<float>((2 * rng::unitFloat(state) - 1) * bound);
  }
}

EmbeddingShard::EmbeddingShard(const EmbeddingSpec& spec, int shard, UpdateRule rule)
    : spec_(spec), shard_(shard), rule_(rule) {
  validateEmbeddingSpec(spec);
  GS_CHECK(shard >= 0 && shard < spec.shards);
  GS_CHECK(rule.kind == UpdateRule::Kind::kAdagrad ||
           (rule.kind == UpdateRule::Kind::kSgd && rule.momentum == 0));
  const auto dim = static_cast<size_t>(spec.dim);
  for (int t = 0; t < spec.tables(); ++t) {
    tableStart_.push_back(keys_.size());
    for (uint64_t row = static_cast<uint64_t>(shard); row < spec.tableRows[t];
         row += static_cast<uint64_t>(spec.shards)) {
      keys_.push_back(rowKey(t, row));
    }
  }
  values_.resize(keys_.size() * dim);
  for (size_t i = 0; i < keys_.size(); ++i) {
    initialRow(spec, tableOfKey(keys_[i]), rowOfKey(keys_[i]),
               std::span(values_).subspan(i * dim, dim));
  }
  if (rule.stateSlots() > 0) state_.assign(values_.size(), 0.0f);
  accesses_.assign(keys_.size(), 0);
  pending_.assign(keys_.size(), 0);
}

std::optional<uint64_t> EmbeddingShard::localIndex(uint64_t key) const {
  const int table = tableOfKey(key);
  const uint64_t row = rowOfKey(key);
  if (table >= spec_.tables() || row >= spec_.tableRows[table] ||
      row % static_cast<uint64_t>(spec_.shards) != static_cast<uint64_t>(shard_)) {
    return std::nullopt;
  }
  return tableStart_[table] + row / static_cast<uint64_t>(spec_.shards);
}

void EmbeddingShard::gather(std::span<const uint64_t> locals, std::span<float> out) const {
  const auto dim = static_cast<size_t>(spec_.dim);
  GS_CHECK_EQ(out.size(), locals.size() * dim);
  for (size_t i = 0; i < locals.size(); ++i) {
    std::memcpy(out.data() + i * dim, values_.data() + locals[i] * dim, dim * sizeof(float));
  }
}

void EmbeddingShard::apply(std::span<const uint64_t> locals, std::span<const float> gradients,
                           std::span<const uint32_t> accesses, uint64_t round) {
  const auto dim = static_cast<size_t>(spec_.dim);
  GS_CHECK_EQ(gradients.size(), locals.size() * dim);
  GS_CHECK_EQ(accesses.size(), locals.size());
  for (size_t i = 0; i < locals.size(); ++i) {
    const uint64_t row = locals[i];
    std::span<float> state =
        state_.empty() ? std::span<float>() : std::span(state_).subspan(row * dim, dim);
    applyUpdate(rule_, std::span(values_).subspan(row * dim, dim), gradients.subspan(i * dim, dim),
                {state, {}}, 1);
    accesses_[row] += accesses[i];
    pending_[row] += accesses[i];
    if (sample_) sample_->record(row, accesses[i], round);
  }
}

void EmbeddingShard::enableSubSample(double rate, uint64_t seed) {
  sample_.emplace(rate, rng::mixSeed(seed, static_cast<uint64_t>(shard_)));
}

std::vector<uint64_t> EmbeddingShard::takeSubSample() {
  return sample_ ? sample_->take() : std::vector<uint64_t>{};
}

uint64_t EmbeddingShard::accessesHeld() const {
  uint64_t held = 0;
  for (uint64_t a : accesses_) held += a;
  return held;
}

std::vector<Section> EmbeddingShard::saveFull(int64_t step) {
  return sections(step, true, {});
}

std::vector<Section> EmbeddingShard::savePartial(int64_t step, std::span<const uint64_t> locals) {
  return sections(step, false, locals);
}

std::vector<Section> EmbeddingShard::sections(int64_t step, bool full,
                                              std::span<const uint64_t> locals) {
  const auto dim = static_cast<size_t>(spec_.dim);
  std::vector<uint64_t> rows;
  if (full) {
    rows.resize(keys_.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  } else {
    rows.assign(locals.begin(), locals.end());
  }
  std::vector<float> values(rows.size() * dim), state(state_.empty() ? 0 : rows.size() * dim);
  std::vector<uint64_t> accesses(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    GS_CHECK_LT(rows[i], keys_.size());
    std::memcpy(&values[i * dim], &values_[rows[i] * dim], dim * sizeof(float));
    if (!state.empty()) std::memcpy(&state[i * dim], &state_[rows[i] * dim], dim * sizeof(float));
    accesses[i] = accesses_[rows[i]];
    pending_[rows[i]] = 0;
  }
  nlohmann::json meta = {{"format", kFormat},
                         {"shard", shard_},
                         {"shards", spec_.shards},
                         {"dim", spec_.dim},
                         {"tables", spec_.tableRows},
                         {"optimizer", optimizerName(rule_)},
                         {"kind", full ? "full" : "partial"},
                         {"step", step},
                         {"rows", rows.size()}};
  const std::string text = meta.dump();
  std::vector<Section> out;
  out.push_back({"meta", std::vector<uint8_t>(text.begin(), text.end())});
  if (!full) out.push_back({"rows", bytesOf(std::span<const uint64_t>(rows))});
  out.push_back({"values", bytesOf(std::span<const float>(values))});
  if (!state.empty()) out.push_back({"state", bytesOf(std::span<const float>(state))});
  out.push_back({"accesses", bytesOf(std::span<const uint64_t>(accesses))});
  return out;
}

void EmbeddingShard::restore(const LoadedCheckpoint& full,
                             std::span<const LoadedCheckpoint> partials) {
  load(full, true);
  for (const LoadedCheckpoint& partial : partials) load(partial, false);
  std::fill(pending_.begin(), pending_.end(), 0u);
}

// Checks a save's description against this shard, then copies its rows in.
void EmbeddingShard::load(const LoadedCheckpoint& save, bool full) {
  auto refuse = [&](const std::string& what) {
    throw DataError(fmt::format("shard {}: checkpoint '{}' {}", shard_, save.path, what));
  };
  const auto& metaBytes = findSection(save.sections, "meta").data;
  nlohmann::json meta = nlohmann::json::parse(metaBytes.begin(), metaBytes.end(), nullptr, false);
  if (meta.is_discarded() || !meta.is_object()) refuse("has no readable description");
  const nlohmann::json expected = {{"format", kFormat},
                                   {"shard", shard_},
                                   {"shards", spec_.shards},
                                   {"dim", spec_.dim},
                                   {"tables", spec_.tableRows},
                                   {"optimizer", optimizerName(rule_)},
                                   {"kind", full ? "full" : "partial"}};
  for (const auto& [key, value] : expected.items()) {
    if (!meta.contains(key) || meta[key] != value) {
      refuse(fmt::format("is of another embedding: its {} is {}, this run's {}", key,
                         meta.contains(key) ? meta[key].dump() : "missing", value.dump()));
    }
  }
  const auto dim = static_cast<size_t>(spec_.dim);
  std::vector<uint64_t> rows;
  if (full) {
    rows.resize(keys_.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  } else {
    rows = valuesOf<uint64_t>(findSection(save.sections, "rows").data, save.path, "rows");
  }
  auto values = valuesOf<float>(findSection(save.sections, "values").data, save.path, "values");
  auto accesses =
      valuesOf<uint64_t>(findSection(save.sections, "accesses").data, save.path, "accesses");
  std::vector<float> state;
  if (!state_.empty())
    state = valuesOf<float>(findSection(save.sections, "state").data, save.path, "state");
  if (values.size() != rows.size() * dim || accesses.size() != rows.size() ||
      (!state_.empty() && state.size() != values.size())) {
    refuse(fmt::format("holds sections of mismatched sizes for {} rows", rows.size()));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= keys_.size()) refuse(fmt::format("names row {} of {}", rows[i], keys_.size()));
    std::memcpy(&values_[rows[i] * dim], &values[i * dim], dim * sizeof(float));
    if (!state_.empty()) std::memcpy(&state_[rows[i] * dim], &state[i * dim], dim * sizeof(float));
    accesses_[rows[i]] = accesses[i];
  }
}

}  // namespace gradsync
