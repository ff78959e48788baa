// The CPU's peak multiply-add rates, measured: the physical limit a
// projection kernel's GFLOP/s is held against.
//
// Each thread (one per online core) runs 24 (AVX2: 12) independent
// accumulators through back-to-back FMAs on registers only, so nothing but
// the FMA units bounds it: float32 `vfmadd231ps` on 256-bit (AVX2) and
// 512-bit (AVX-512) registers, and AVX512-BF16's `vdpbf16ps` (two BF16
// products per float32 lane). An instruction set the CPU lacks (checked at run
// time) reports 0. A FLOP is a multiply or an add, as in the engine's
// projection FLOPs.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace nightshift::bench {

struct CpuPeak {
  double f32_avx2 = 0;    // FLOP/s, all cores
  double f32_avx512 = 0;  // FLOP/s, all cores
  double bf16 = 0;        // FLOP/s, all cores (vdpbf16ps)
  // The widest float32 rate this CPU has.
  double F32() const { return f32_avx512 > 0 ? f32_avx512 : f32_avx2; }
};

#if defined(__x86_64__)
#define NS_PEAK_R12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define NS_PEAK_R24(op) \
  NS_PEAK_R12(op)       \
  op(12) op(13) op(14) op(15) op(16) op(17) op(18) op(19) op(20) op(21) op(22) op(23)
#define NS_PEAK_BF16(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define NS_PEAK_FMA_Z(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define NS_PEAK_FMA_Y(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n\t"

// FLOPs per loop iteration: 24 x 16 lanes x 2 x 2, 24 x 16 x 2, 12 x 8 x 2.
__attribute__((target("avx512f,avx512bf16"))) inline void PeakBf16Loop(long n) {
  for (long i = 0; i < n; ++i) asm volatile(NS_PEAK_R24(NS_PEAK_BF16)::: "memory");
}
__attribute__((target("avx512f"))) inline void PeakFmaZmmLoop(long n) {
  for (long i = 0; i < n; ++i) asm volatile(NS_PEAK_R24(NS_PEAK_FMA_Z)::: "memory");
}
__attribute__((target("avx2,fma"))) inline void PeakFmaYmmLoop(long n) {
  for (long i = 0; i < n; ++i) asm volatile(NS_PEAK_R12(NS_PEAK_FMA_Y)::: "memory");
}

// FLOP/s of `loop` on `threads` threads, each running `iterations`: the
// best of three runs (a peak; the others lost time to something else).
inline double PeakRate(void (*loop)(long), int threads, long iterations, double flops_per_iter) {
  loop(iterations / 10);  // warm-up: the units' clocks
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&] { loop(iterations); });
    for (std::thread& t : pool) t.join();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, flops_per_iter * static_cast<double>(iterations) * threads / s);
  }
  return best;
}

// About half a second per instruction set on a 3 GHz core.
inline CpuPeak MeasureCpuPeak(int threads) {
  CpuPeak p;
  constexpr long kIterations = 25'000'000;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.f32_avx2 = PeakRate(&PeakFmaYmmLoop, threads, 2 * kIterations, 12 * 8 * 2);
  }
  if (__builtin_cpu_supports("avx512f")) {
    p.f32_avx512 = PeakRate(&PeakFmaZmmLoop, threads, kIterations, 24 * 16 * 2);
    if (__builtin_cpu_supports("avx512bf16")) {
      p.bf16 = PeakRate(&PeakBf16Loop, threads, kIterations, 24 * 16 * 4);
    }
  }
  return p;
}
#else
inline CpuPeak MeasureCpuPeak(int) { return {}; }
#endif

}  // namespace nightshift::bench
