#include "codec_costs.h"

#include <fmt/format.h>

#include "bench_compress.h"
#include "common/simd.h"
#include "common/units.h"
#include "gradsync/error.h"

namespace gradsync {

std::string CodecCostSource::describe() const {
  std::string text = "codec costs: " + origin;
  if (!measured || measured->empty()) return text;
  text += "; ns per element, encode + decode of one encoding:";
  for (const auto& [spec, cost] : *measured) {
    text += fmt::format(" {} {:.2f} + {:.2f},", spec, cost.encodeSeconds * 1e9,
                        cost.decodeSeconds * 1e9);
  }
  text.pop_back();
  return text;
}

CodecCostSource codecCostSource(const SimModelFlags& flags, const ModelProfile& profile) {
  CodecCostSource source;
  if (!flags.codecNsPerElement.empty()) {
    const double ns = parseNumber(flags.codecNsPerElement, "--codec-ns-per-element");
    if (!(ns >= 0)) {
      throw ConfigError(
          fmt::format("--codec-ns-per-element must be >= 0, not {}", flags.codecNsPerElement));
    }
    source.origin = fmt::format("--codec-ns-per-element {:g} for every method", ns);
    if (ns > 0) source.cost = [ns](const std::string&) { return sim::CodecCost{ns * 1e-9, 0}; };
    return source;
  }
  if (!profile.codecsOnCpu) {
    source.origin =
        "free (the profile's device runs codecs as kernels beside compute; "
        "--codec-ns-per-element to charge them)";
    return source;
  }
  source.origin = fmt::format(
      "measured on this machine's CPU, as the profile's codecs run there (gradsync bench "
      "compress, {}M elements, {}), decodes charged once per encoding received",
      kCodecTimingElements >> 20, simd::name(simd::active()));
  source.measured = std::make_shared<std::map<std::string, sim::CodecCost>>();
  source.cost = [measured = source.measured](const std::string& spec) {
    auto it = measured->find(spec);
    if (it == measured->end()) {
      const CodecTiming timing = measureCodec(spec);
      it = measured
               ->emplace(spec, sim::CodecCost{timing.encodeSecondsPerElement,
                                              timing.decodeSecondsPerElement})
               .first;
    }
    return it->second;
  };
  return source;
}

}  // namespace gradsync
