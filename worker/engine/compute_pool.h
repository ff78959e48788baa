// The engine's compute threads for its few large operations (the
// projections): a fixed set of threads that sleep between calls.
//
// ATen's OpenMP threads spin after every parallel region, and a pass runs
// thousands of small ones; on a machine whose cores are shared that spinning
// took half of a 64-sequence pass here. So ATen runs single-threaded and the
// projections, each milliseconds long, are split here instead.
//
// libtorch-free. Concurrent ParallelFor calls run one after the other;
// SetComputePoolThreads must not run concurrently with ParallelFor.
#pragma once

#include <cstdint>
#include <functional>

namespace nightshift::engine {

// Threads used by ParallelFor, the caller's included (>= 1). Process-wide.
void SetComputePoolThreads(int threads);
int ComputePoolThreads();

// Calls fn(begin, end) on disjoint ranges covering [0, n), one per thread
// (ranges of at least `grain`, fewer threads when n is small), the calling
// thread taking the first; returns when all are done. fn must not throw.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace nightshift::engine
