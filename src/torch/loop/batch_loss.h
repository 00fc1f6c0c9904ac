// A batch that a DataSource gathered, as the model's tensors, and its loss: what the trainers'
// steps and the evaluations share, for classifiers and language models alike.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>

#include "torch/loop/data_source.h"
#include "torch/models/models.h"

namespace gradsync {

// `count` samples in DataSource::batch's buffers (wrapped, not copied: they must outlive the
// returned graph's backward): for images the mean cross-entropy of net's classes against the
// labels; for text windows (DataSource::windowTokens) the mean next-token cross-entropy, in nats
// per token, of net on each window's first T tokens against its last T.
torch::Tensor batchLoss(Model& net, const DataSource& data, std::span<float> inputs,
                        std::span<int64_t> labels, int64_t count);

}  // namespace gradsync
