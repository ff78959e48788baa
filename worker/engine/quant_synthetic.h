// Quantized weights of any shape and format made up in memory, laid out as
// the layer loader places a checkpoint's parts: what the compute
// measurement times quantized projections on (compute_measure.h), and what
// the quantized kernels' tests and bench multiply.
//
// libtorch-free; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "worker/checkpoint/checkpoint.h"

namespace nightshift::engine {

struct QuantWeightSpec {
  checkpoint::QuantFormat format = checkpoint::QuantFormat::kAwq;
  int64_t out = 0, in = 0;                  // AWQ: out a multiple of 8; GPTQ: in a multiple of 8
  int64_t group_size = 128;                 // AWQ/GPTQ (in must be a multiple for AWQ)
  bool g_idx = false;                       // GPTQ: a g_idx part, rows shuffled among groups
  int64_t block_out = 128, block_in = 128;  // kFp8Block
  checkpoint::DType scale_dtype = checkpoint::DType::kF16;
};

// The weight: `info` (a QuantizedTensor with its parts and part_offsets)
// and the bytes its data pointer is, parts 4096-aligned back to back.
struct SyntheticQuantWeight {
  checkpoint::TensorInfo info;
  std::string bytes;
  const unsigned char* data() const { return reinterpret_cast<const unsigned char*>(bytes.data()); }
};

// Random packed values from `seed` (never an FP8 NaN), scales a small
// weight's (about 0.01), zero points anywhere in [0, 15].
SyntheticQuantWeight MakeSyntheticQuantWeight(const QuantWeightSpec& spec, uint64_t seed = 1);

}  // namespace nightshift::engine
