// The adapter between the checkpoint metadata reader and exact mode: turns a
// checkpoint::Checkpoint (already read and validated) into the planner's
// plain CheckpointShape. Reads no files itself.
#pragma once

#include "common/status.h"
#include "planner/exact.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::planner {

// The sizes and shapes exact mode needs. Sizes come from the tensors and
// files (tensor_bytes: StreamedBytesPerPass, planner/model_facts.h); shapes
// from config.json through the one config reader,
// checkpoint::ParseModelShape (worker/checkpoint/model_config.h): a
// registered family's own parser, else the names the other families use
// (hidden_size | n_embd | d_model, text_config nesting, multi_query, ...).
// vocab is the config's vocab_size, else the first dimension of the largest
// embedding tensor; layers is the number of decoder layers found in the
// tensors; stored_dtype_bytes the element size of the dtype holding the most
// bytes (a quantized projection's bytes count as F16's, the dtype it is
// multiplied in on a GPU). Quantized checkpoints (checkpoint/quantization.h)
// are priced as stored: tensor_bytes is their packed bytes, parameters their
// logical weights. moe is MoeFactsOf(ckpt) (planner/model_facts.h) at the
// engine's slice size; largest_group_bytes is Checkpoint::LargestGroupBytes,
// except that a mixture of experts' layers count as the loader reads them
// (each sparse layer's dense part and expert slices, StreamedGroupBytes). A
// config without a hidden size or head count, or a checkpoint
// without decoder layers, is DataLoss naming what is missing. Pure;
// thread-safe.
StatusOr<CheckpointShape> ShapeOf(const checkpoint::Checkpoint& ckpt);

}  // namespace nightshift::planner
