// Timing the projection kernels (compute_choice.h) on a model's shapes.
//
// Header libtorch-free; the implementation runs Linear (kernels.h) on
// synthetic weights of each shape and dtype, so nothing is read from the
// checkpoint. Thread-safe: measurements of the same key in one process run
// once (later calls get the first's figures).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/engine/compute_choice.h"

namespace nightshift::engine {

struct MeasureOptions {
  // Where the measurement is cached (ComputeCachePath); "" keeps it in this
  // process only.
  std::string state_dir;
  // Each kernel, shape and bucket is run once to warm up, then in each of
  // three rounds until a third of this much time was spent on it (at least
  // once, at most 5 times); the fastest run of all counts. A round times
  // every kernel at a bucket one after another. Shapes taller than 4096
  // rows are timed on 4096 and scaled.
  double min_seconds = 0.02;
};

struct MeasuredCompute {
  ComputeMeasurement measurement;
  bool cached = false;     // read from the cache file (or this process's earlier call)
  std::string cache_path;  // "" without a state_dir
};

// Times every kernel at every row bucket on `shapes` with the compute
// pool's current threads (SetComputeThreads), unless the cache in
// options.state_dir (or this process) already holds that key. A cache that
// cannot be written is not an error (the figures are still returned).
// Quantized shapes are timed on the quantized kernel (see ProjectionShape).
// InvalidArgument for no shapes or an unquantized shape that is not F32, F16
// or BF16; Internal for a libtorch failure.
StatusOr<MeasuredCompute> MeasureProjections(const std::vector<ProjectionShape>& shapes,
                                             const MeasureOptions& options = {});

// The linked libtorch's version, e.g. "1.13.0".
std::string TorchVersion();

}  // namespace nightshift::engine
