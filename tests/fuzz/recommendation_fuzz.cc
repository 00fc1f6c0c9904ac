// Feeds arbitrary bytes to the recommendation path's decoders of files it does not control: a
// line of a Criteo TSV log (data/criteo_tsv.h) and an embedding shard's checkpoint sections
// (ps/embedding_shard.h, what a replacement server restores). Each must throw DataError and
// nothing else: no crash, no out-of-bounds row, no allocation from an unchecked length.
//
// Input: one mode byte, then
//   mode 0: a TSV line; an accepted record must format back to a line that parses to itself;
//   mode 1, 2: a full (1) or partial (2) save of shard 1 of a small embedding, as sections: a
//           2-byte little-endian length L, the "meta" JSON (L bytes), then the rest cut into
//           "values", "state", "accesses" (and "rows" for a partial save) at 1-byte offsets
//           taken from the first remaining bytes, so that the fuzzer controls every size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/criteo_tsv.h"
#include "gradsync/error.h"
#include "ps/embedding_shard.h"

namespace {

using gradsync::Section;

void fuzzLine(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  try {
    const gradsync::ClickRecord record = gradsync::parseCriteoLine(line, 26, "fuzz");
    const std::string again = gradsync::formatCriteoLine(record);
    const gradsync::ClickRecord back = gradsync::parseCriteoLine(again, 26, "fuzz again");
    if (back.label != record.label || back.counts != record.counts ||
        back.hashes != record.hashes) {
      std::abort();
    }
  } catch (const gradsync::DataError&) {
  }
}

// Cuts `bytes` after `at` into a section called `name`.
Section take(const char* name, const uint8_t*& at, const uint8_t* end, size_t length) {
  length = std::min<size_t>(length, static_cast<size_t>(end - at));
  Section section{name, std::vector<uint8_t>(at, at + length)};
  at += length;
  return section;
}

void fuzzShard(bool full, const uint8_t* data, size_t size) {
  if (size < 2) return;
  const uint8_t* at = data + 2;
  const uint8_t* end = data + size;
  const size_t metaLength = static_cast<size_t>(data[0]) | static_cast<size_t>(data[1]) << 8;
  std::vector<Section> sections;
  sections.push_back(take("meta", at, end, metaLength));
  std::vector<const char*> names = {"values", "state", "accesses"};
  if (!full) names.insert(names.begin(), "rows");
  std::vector<size_t> lengths;
  for (size_t i = 0; i < names.size() && at < end; ++i) lengths.push_back(*at++ * 4u);
  for (size_t i = 0; i < names.size(); ++i) {
    sections.push_back(take(names[i], at, end, i < lengths.size() ? lengths[i] : 0));
  }
  static const gradsync::EmbeddingSpec spec{.tableRows = {5, 3}, .dim = 2, .shards = 2, .seed = 1};
  gradsync::EmbeddingShard shard(spec, 1, gradsync::UpdateRule::adagrad(0.1));
  const gradsync::LoadedCheckpoint save{7, "fuzz", sections};
  try {
    if (full) {
      shard.restore(save, {});
    } else {
      gradsync::EmbeddingShard base(spec, 1, gradsync::UpdateRule::adagrad(0.1));
      const gradsync::LoadedCheckpoint intact{1, "intact", base.saveFull(1)};
      shard.restore(intact, std::vector<gradsync::LoadedCheckpoint>{save});
    }
    std::vector<uint64_t> rows(shard.rows());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
    std::vector<float> values(rows.size() * 2);
    shard.gather(rows, values);  // what was restored is readable
  } catch (const gradsync::DataError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
    case 0:
      fuzzLine(data + 1, size - 1);
      break;
    case 1:
      fuzzShard(true, data + 1, size - 1);
      break;
    default:
      fuzzShard(false, data + 1, size - 1);
  }
  return 0;
}
