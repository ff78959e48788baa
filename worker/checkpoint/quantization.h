// Quantized checkpoints as published: which format config.json's
// `quantization_config` (or GPTQ's `quantize_config.json`) declares, and the
// tensors of each quantized module, checked against each other and folded
// into one logical weight per module (TensorInfo::quant).
//
// Supported (each layout as the upstream code writes it):
//   awq                 AutoAWQ `version: gemm`, 4 bits, zero_point: qweight
//                       int32 [in, out/8] (nibbles along out in the order
//                       0,2,4,6,1,3,5,7), qzeros int32 [in/g, out/8] packed the
//                       same way, scales [in/g, out]; W^T[i, o] = (q - z) s.
//   gptq                v1 checkpoint format (`checkpoint_format` gptq or
//                       absent), 4 bits, int32 packing: qweight [in/8, out]
//                       (input row 8r + j in bits 4j of row r), qzeros int32
//                       [groups, out/8] storing zero - 1, scales [groups, out],
//                       g_idx int32 [in] (any permutation with desc_act);
//                       symmetric or not; group_size -1 is one group.
//   compressed-tensors  `float-quantized`, 8-bit float weights per channel:
//                       weight F8_E4M3 [out, in], weight_scale [out, 1].
//   fp8                 `fmt: e4m3` with `weight_block_size [bo, bi]`: weight
//                       F8_E4M3 [out, in], weight_scale_inv [ceil(out/bo),
//                       ceil(in/bi)].
// Dynamic activation quantization (`input_activations.dynamic: true`,
// `activation_scheme: dynamic`) is ignored: activations stay float. Anything
// else is refused by name with Unimplemented: other quant methods
// (bitsandbytes, exl2, ...), AWQ GEMV/Marlin/Exllama packings, GPTQ of other
// bit widths, v2 or Marlin checkpoints, static activation scales
// (`activation_scheme: static`, `input_scale` tensors), KV-cache scales,
// compressed-tensors int or packed formats, quantized embeddings or LM heads.
//
// libtorch-free pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::checkpoint {

// The format `config` (config.json) declares in `quantization_config`, or
// `quantize_config` (quantize_config.json, null when absent) when it has
// none. kNone when neither says anything. Errors name `dir_label`'s file:
// Unimplemented for an unsupported method or variant, DataLoss for a
// malformed value.
StatusOr<QuantizationInfo> ParseQuantization(const nlohmann::json& config,
                                             const nlohmann::json& quantize_config,
                                             const std::string& dir_label);

// Replaces each quantized module's parts in `tensors` (sorted by name, and
// still sorted after) by one tensor `<module>.weight` [out, in] whose `quant`
// lists them. Checks every module is complete, its parts' dtypes and shapes
// against each other and the group or block size, and refuses input_scale
// tensors and quantized embeddings or LM heads. With format kNone it changes
// nothing (the engine's binding refuses packed tensors it does not expect).
// Errors are one line naming `dir_label` and the tensor.
Status FoldQuantizedTensors(const std::string& dir_label, const QuantizationInfo& info,
                            std::vector<TensorInfo>* tensors);

// "none", "awq", "gptq", "fp8-channel", "fp8-block": inspect's and the
// generator's spelling.
const char* QuantFormatName(QuantFormat format);

// The F8_E4M3 (OCP "fn": no infinities, NaN at 0x7f/0xff) value of every
// byte, exactly.
const float* Fp8E4M3Table();

}  // namespace nightshift::checkpoint
