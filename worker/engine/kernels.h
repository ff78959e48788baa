// The decoder's building blocks on ATen tensors, computing in float32 the way
// transformers does: weights are read from the mapped checkpoint and upcast
// just before use, in blocks (see convert.h), never as whole fp32 copies of a
// layer.
//
// Activations are float32: CPU tensors on the CPU path, device tensors on the
// accelerator path (weights with a device), where only the projections run
// in the weights' 16-bit dtype (MatmulDtype). Every function returns a new
// tensor and leaves its inputs alone (weights are read-only mappings:
// writing one would fault). libtorch exceptions propagate; the engine
// converts them to Status at its boundary. Thread-safe as far as ATen is.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "worker/checkpoint/checkpoint.h"
#include "worker/engine/compute_choice.h"
#include "worker/engine/model_config.h"

namespace nightshift::engine {

// A tensor as stored in the checkpoint, in memory. Empty (false) when the
// model has no such weight, e.g. a bias it does not use.
struct Weight {
  const checkpoint::TensorInfo* info = nullptr;
  const unsigned char* data = nullptr;
  // Unset: `data` is host memory (the mapped file or a loader buffer), which
  // the CPU kernels read and convert themselves. Set: `data` is in this
  // device's memory (the engine's accelerator path, see engine.h), and the
  // kernels run ATen's generic operators on views of it.
  std::optional<at::Device> device;
  // Host weights only: the kernel each row bucket of a projection runs
  // (compute_choice.h; the engine's choice, which outlives the weight). Null:
  // float32, the small-batch kernel up to kSmallMatmulMaxRows rows when the
  // CPU has it, else converted blocks and a GEMM.
  const KernelPlan* plan = nullptr;

  explicit operator bool() const { return info != nullptr; }
};

// The ATen type of a stored dtype: F32, F16, BF16, I32 (packed int4), and
// the raw bytes (kByte) of F8_E4M3 and U8. Throws std::invalid_argument for
// others.
at::ScalarType ScalarTypeOf(checkpoint::DType dtype);

// The weight as a `dtype` tensor of its stored shape. On a device: a view of
// its memory, converted when its dtype differs (and first copied to aligned
// memory when its address is not a multiple of its element size, which
// safetensors does not promise). In host memory: ToFloat, and `dtype` must
// be float32. Throws std::invalid_argument for a dtype that is not F32, F16
// or BF16.
at::Tensor WeightAs(const Weight& weight, at::ScalarType dtype);

// Sets the process-wide compute threads: the compute pool's (compute_pool.h)
// to `threads`, which splits the projections; ATen's intra-op threads and
// OpenBLAS's own pool (when OpenBLAS is the BLAS) to one. Also has glibc's
// malloc keep freed memory for the next pass's temporaries (KeepFreedMemory).
void SetComputeThreads(int threads);

// The OpenBLAS core whose kernels float32 GEMMs run (openblas_get_corename:
// "Cooperlake", "Haswell", ...; OPENBLAS_CORETYPE in the environment forces
// one), or "" when the BLAS is not OpenBLAS. Part of what a compute
// measurement holds for: this machine's environment sets
// OPENBLAS_CORETYPE=Haswell, whose AVX2 kernels ran a 1024-token float32
// prefill of bench-1.7b in 13.3 s where the core OpenBLAS detects itself
// there (Cooperlake, AVX-512) took 8.9 s (AMD EPYC family 26, 2 threads).
std::string OpenBlasCore();

// Has glibc's malloc serve blocks up to 1 GiB from its heap and never give
// freed memory back to the system (mallopt M_MMAP_THRESHOLD and
// M_TRIM_THRESHOLD). By default a block above its dynamic threshold (at most
// 32 MiB: attention's score blocks, a micro-batch's MLP temporaries) is a
// fresh mmap each time and is unmapped when freed, so every micro-batch of
// every layer pays page faults to touch it again: a 1024-token prefill pass
// of bench-1.7b ran 8.2 s, 5.7 s with this (AMD EPYC family 26, 2 threads;
// VmHWM the same, 412-420 MiB). The peak is what the pass plan bounds; the
// process keeps it resident between passes instead of refaulting it.
void KeepFreedMemory();

// The whole weight as float32 with its stored shape. For an aligned F32
// weight this is a zero-copy view of the read-only mapping.
at::Tensor ToFloat(const Weight& weight);

// The dtype a device weight's projection runs in: BF16 for BF16 weights, F16
// for F16 ones on CUDA, else float32 (libtorch 1.13's CPU kernels have no F16
// matmul).
at::ScalarType MatmulDtype(const Weight& weight);

// x [T, in] times weight [out, in] transposed, plus bias [out] when given:
// [T, out] in x's dtype. In host memory, the kernel of weight.plan for T rows
// (compute_choice.h): float32 ones read an aligned F32 weight in place and
// convert BF16/F16 (and unaligned F32) weights a block of rows (about
// `block_bytes` of float32) at a time into a scratch buffer, or widen them
// in registers (the small-batch kernel); the BF16 kernel rounds x to BF16
// and multiplies BF16 weights in place (others converted to BF16 in blocks
// of about `block_bytes`) through ATen, as a device does; f32-tile widens 8
// weight rows at a time for the engine's own dot kernel (dot_kernel.h),
// whose sums are in one order whatever the rows. On a device, x is
// cast to MatmulDtype and the product (accumulated in float32 by the BLAS)
// cast back before the bias. The bias is added in float32 on every path.
inline constexpr int64_t kConvertBlockBytes = 4 << 20;
at::Tensor Linear(const at::Tensor& x, const Weight& weight, const Weight& bias = {},
                  int64_t block_bytes = kConvertBlockBytes);

// Normalises over the last dimension: RMSNorm (weight, or 1 + weight), or
// LayerNorm with `bias`.
at::Tensor Norm(const at::Tensor& x, NormKind kind, const Weight& weight, const Weight& bias,
                double eps);

at::Tensor Activate(const at::Tensor& x, Activation activation);

// 1 / (1 + exp(-x)) elementwise. On the CPU each element through libm's
// exp, as ATen's scalar path computes it: ATen's vector path rounds some
// values differently, and which elements of a narrow tensor (a shared
// expert's [rows, 1] gate) take which path depends on how many rows it has.
at::Tensor Sigmoid(const at::Tensor& x);

// Rows `ids` of `table` [rows, width] as float32 [ids.size(), width]; reads
// only those rows. Ids must be in range.
at::Tensor GatherRows(const Weight& table, const std::vector<int64_t>& ids);

// cos and sin of position x inverse frequency, each [T, 2 * inv_freq.size()]
// laid out as transformers' cat(freqs, freqs).
struct RopeAngles {
  at::Tensor cos;
  at::Tensor sin;
};
RopeAngles ComputeRopeAngles(const std::vector<float>& inv_freq,
                             const std::vector<int64_t>& positions);

// Rotate-half RoPE on the first angles.cos.size(1) dimensions of each head of
// x [T, heads, head_dim]; the remaining dimensions pass through (partial
// rotary).
at::Tensor ApplyRope(const at::Tensor& x, const RopeAngles& angles);

// Scaled dot-product attention of one sequence with grouped-query heads:
// q [rows, heads, d], keys and values [kv_heads, L, d] (query head h reads KV
// head h / (heads / kv_heads), as transformers' repeat_kv), `allowed`
// [rows, L] bool (true: row may attend to that key; undefined: every row
// attends to every key, as a decode step's single row does). Softmax in float32.
// Returns [rows, heads * d]. Rows are processed in chunks whose score matrix
// stays under `max_score_bytes` (at least one row), so a long prompt never
// materialises rows x L x heads scores at once: the scores are scaled and
// masked in place, so a chunk's temporaries are at most two score matrices
// (scores and their softmax) plus its rows of `allowed` negated.
// A chunk of at least kParallelAttentionFlops (4 x rows x heads x L x d, both
// products) on the CPU splits its KV heads across the compute pool
// (compute_pool.h); a smaller one, such as a decode row's, runs on the
// calling thread, where waking the pool would cost more than it saves.
inline constexpr int64_t kMaxAttentionScoreBytes = 64 << 20;
inline constexpr int64_t kParallelAttentionFlops = int64_t{1} << 24;
at::Tensor Attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                     const at::Tensor& allowed, double scale,
                     int64_t max_score_bytes = kMaxAttentionScoreBytes);

// One causal row of a sequence that sees every key of its cache, as a decode
// step's does: row `row` of q and of the output, keys and values [kv_heads,
// L, d] as Attention's.
struct DecodeRow {
  int64_t row = 0;
  at::Tensor keys;  // [kv_heads, L, d]
  at::Tensor values;
  // Null: the row attends to all L keys. Otherwise to the `length` keys at
  // key_rows[0..length) of them, in that order (a trie row's ancestors).
  const int32_t* key_rows = nullptr;
  int64_t length = 0;
  // A cache that shares a prefix with others (KVCache::Share): the row
  // first attends to the `shared` keys at shared_rows[0..shared) of
  // shared_keys / shared_values [kv_heads, S, d], then to all L of `keys`
  // (key_rows null). Float32 on the CPU only (read in place by the
  // engine's loops; elsewhere std::invalid_argument).
  at::Tensor shared_keys = {};
  at::Tensor shared_values = {};
  const int32_t* shared_rows = nullptr;
  int64_t shared = 0;
};

// Attention(q.narrow(0, r.row, 1), r.keys, r.values, {}, scale) into row
// r.row of out [rows, heads * d], for every r (over the keys it names).
// Float32 on the CPU these run the engine's own loops (decode_attention.h):
// consecutive rows over one cache (a prompt's, each over a longer prefix)
// go together, up to eight, so they share each read of a key and a value,
// each row's output bitwise what it gets alone; the blocks are split across
// the compute pool, without allocating on its threads. Elsewhere, Attention.
void AttendDecodeRows(const at::Tensor& q, const std::vector<DecodeRow>& rows, double scale,
                      at::Tensor& out);

// The causal mask of `rows` new tokens after `past` cached ones:
// [rows, past + rows], row i allowed keys 0..past + i.
at::Tensor CausalMask(int64_t past, int64_t rows);

}  // namespace nightshift::engine
