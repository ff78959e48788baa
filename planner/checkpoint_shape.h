// The adapter between the checkpoint metadata reader and exact mode: turns a
// checkpoint::Checkpoint (already read and validated) into the planner's
// plain CheckpointShape. Reads no files itself.
#pragma once

#include "common/status.h"
#include "planner/exact.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::planner {

// The sizes and shapes exact mode needs. Sizes come from the tensors and
// files; shapes from config.json (from its `text_config` when the top level
// has no hidden size, as multimodal configs nest it), under the names the
// families use:
//   hidden        hidden_size | n_embd | d_model
//   heads         num_attention_heads | n_head | num_heads
//   kv_heads      num_key_value_heads | num_kv_heads | n_head_kv,
//                 1 when multi_query is true, else = heads
//   head_dim      head_dim when a positive integer, else hidden / heads
//   intermediate  intermediate_size | n_inner | ffn_dim | ffn_hidden_size,
//                 else 4 x hidden
//   vocab         vocab_size, else the first dimension of the largest
//                 embedding tensor
// layers is the number of decoder layers found in the tensors;
// stored_dtype_bytes the element size of the dtype holding the most bytes.
// A config without a hidden size or head count, or a checkpoint without
// decoder layers, is DataLoss naming what is missing. Pure; thread-safe.
StatusOr<CheckpointShape> ShapeOf(const checkpoint::Checkpoint& ckpt);

}  // namespace nightshift::planner
