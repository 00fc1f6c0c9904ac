#include "compress/registry.h"

#include <algorithm>

#include <fmt/format.h>

#include "compress/impl/methods.h"
#include "gradsync/error.h"

namespace gradsync {

// Defaults follow the papers where they state one (docs/algorithms.md gives each source).
const std::vector<MethodInfo>& compressionMethods() {
  using namespace methods;
  static const std::vector<MethodInfo> table = {
      {"fp16", "", 0, {}, false, false, "IEEE half precision, summed in the ring", makeFp16},
      {"topk", "R", 0.01, {}, true, false, "exact top-k by magnitude, density R", makeTopK},
      {"mstopk",
       "R",
       0.01,
       {"iters"},
       true,
       false,
       "Shi et al.'s multiple-sampling top-k threshold search (no sort), density R",
       makeMsTopK},
      {"gtopk",
       "R",
       0.01,
       {},
       true,
       false,
       "global top-k: local top-k merged pairwise over log2 P rounds",
       makeGTopK},
      {"randomk",
       "R",
       0.01,
       {},
       true,
       false,
       "R of the elements at indices shared by all ranks (summed in the ring)",
       makeRandomK},
      {"dgc",
       "R",
       0.001,
       {"warmup", "clip"},
       false,
       true,
       "deep gradient compression: sampled threshold, momentum correction, clipping, warm-up",
       makeDgc},
      {"qsgd",
       "L",
       16,
       {"bucket"},
       false,
       false,
       "stochastic unbiased quantization to L levels per bucket, bit-packed",
       makeQsgd},
      {"terngrad",
       "",
       0,
       {"clip"},
       false,
       false,
       "stochastic ternary {-s, 0, s} with gradient clipping",
       makeTernGrad},
      {"twobit",
       "T",
       0.5,
       {},
       true,
       false,
       "MXNet's 2-bit threshold codes {-T, 0, +T} (CD-SGD's codec), error feedback",
       makeTwoBit},
      {"onebit",
       "",
       0,
       {"bucket"},
       true,
       false,
       "1-bit SGD: sign bit, per-bucket means of both signs, error feedback",
       makeOneBit},
      {"signsgd",
       "",
       0,
       {"bucket"},
       true,
       false,
       "EF-signSGD: sign scaled by the mean magnitude",
       makeSignSgd},
      {"powersgd",
       "RANK",
       4,
       {},
       true,
       false,
       "rank-RANK power iteration with warm start, summed in the ring",
       makePowerSgd},
      {"gradiveq",
       "D",
       4,
       {"slice", "train", "refresh"},
       true,
       false,
       "PCA projection of slices to D coefficients, summed in the ring",
       makeGradiVeQ},
      {"hitopk",
       "R",
       0.01,
       {"iters", "fp16", "bypass"},
       true,
       false,
       "Shi et al.'s HiTopKComm: reduce-scatter in hosts, MSTopK per shard, sparse allgather "
       "across hosts",
       makeHiTopK,
       /*ownErrorFeedback=*/true},
      {"int8",
       "",
       0,
       {},
       false,
       false,
       "int8 with a scale per 1,024 values, summed in float32 in the int8 ring",
       makeInt8},
      {"rtn",
       "B",
       4,
       {"bucket"},
       true,
       false,
       "B-bit round-to-nearest with a max-abs scale per bucket, error feedback (4-bit outer "
       "gradients)",
       makeRtn},
      {"sparseloco",
       "R",
       1.0 / 64,
       {"chunk", "bits"},
       true,
       false,
       "SparseLoCo's codec: top-k of each chunk of 4,096 with 2-bit values, error feedback",
       makeSparseLoCo},
      {"demo",
       "K",
       32,
       {"side"},
       true,
       false,
       "DeMo's codec: the top K DCT coefficients of each 64x64 chunk, error feedback",
       makeDemo},
  };
  return table;
}

bool failsUnderAdam(const std::string& method) {
  // topk +10.2%, mstopk +10.2%, gtopk +15.0%, dgc +7.7%, powersgd +6.4%, gradiveq +13.3% on
  // gradients; topk +12.3% and powersgd +12.2% on momenta. hitopk is topk across hosts.
  static const std::vector<std::string> measured = {"topk", "mstopk",   "gtopk",   "hitopk",
                                                    "dgc",  "powersgd", "gradiveq"};
  return std::find(measured.begin(), measured.end(), method) != measured.end();
}

std::string methodChoices() {
  std::string choices = "none";
  for (const MethodInfo& m : compressionMethods()) {
    choices += fmt::format(", {}{}{}", m.name, *m.valueName ? ":" : "", m.valueName);
  }
  return choices;
}

const MethodInfo& findMethod(const std::string& name) {
  for (const MethodInfo& m : compressionMethods()) {
    if (name == m.name) return m;
  }
  throw ConfigError(fmt::format("unknown compression method '{}'", name),
                    {.hint = "choose one of: " + methodChoices()});
}

}  // namespace gradsync
