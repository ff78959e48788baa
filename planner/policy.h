// When to stream at all: the activation policy and its inputs.
//
// Streaming trades two to three orders of magnitude of speed for the ability
// to run a model that does not fit, so it is never a preference. Decide()
// turns it on in exactly two cases: a person asked for it ("always"), or
// nothing conventional fits the machine ("auto" with no resident option).
// "never" turns it off, the automatic case included.
//
// The request comes from an explicit setting (a flag, a job field) or from
// the NIGHTSHIFT_STREAMING environment variable, the explicit one winning.
// This module reads no environment: callers pass the variable's value in.
// Every function is pure and thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nightshift::planner {

inline constexpr char kStreamingEnvVar[] = "NIGHTSHIFT_STREAMING";

enum class StreamingRequest { kAuto, kAlways, kNever };

// "auto", "always" or "never".
const char* StreamingRequestName(StreamingRequest request);

// Reads what people type: auto; always, on, true, yes, 1; never, off, false,
// no, 0 (case and surrounding blanks ignored). Empty means "did not say" and
// is kAuto. Anything else is InvalidArgument quoting the word: a typo must not
// quietly turn the feature off.
StatusOr<StreamingRequest> ParseStreamingRequest(std::string_view value);

// The effective request: `explicit_value` when present and non-empty, else
// `env_value` (the environment variable, absent when unset), else kAuto.
// Errors are ParseStreamingRequest's, for whichever value was used.
StatusOr<StreamingRequest> ResolveStreamingRequest(std::optional<std::string> explicit_value,
                                                   std::optional<std::string> env_value);

// What the machine computes on.
enum class Accelerator { kCpu, kCuda, kRocm, kMetal };

// Where a streamed model runs.
enum class Runtime { kCuda, kRocm, kMps, kCpu };

// "cuda", "rocm", "mps" or "cpu".
const char* RuntimeName(Runtime runtime);

// The runtime streaming uses on `accelerator`: CUDA on CUDA, ROCm on ROCm
// (same code path), Metal through torch's MPS; a CPU-only machine only when
// `allow_cpu` (slow enough that it has to be allowed explicitly).
std::optional<Runtime> RuntimeFor(Accelerator accelerator, bool allow_cpu);

// Known limits of streaming, one sentence each; empty when nothing runs
// (no runtime). The same list on every runtime.
std::vector<std::string> Caveats(std::optional<Runtime> runtime);

struct DecideInput {
  StreamingRequest request = StreamingRequest::kAuto;
  // Whether a conventional (whole-model, resident) option already fits this
  // machine; the automatic trigger fires only when it does not.
  bool conventional_resolved = true;
  Accelerator accelerator = Accelerator::kCpu;
  bool allow_cpu = false;
  // Whether this binary carries the streaming engine at all.
  bool engine_available = true;
  std::optional<double> read_gbs;  // measured disk bandwidth; unknown when absent
};

enum class Trigger { kManual, kFallback, kDisabled, kNotNeeded };

// "manual", "fallback", "disabled" or "not-needed".
const char* TriggerName(Trigger trigger);

struct Decision {
  bool activate = false;
  StreamingRequest request = StreamingRequest::kAuto;
  Trigger trigger = Trigger::kNotNeeded;
  std::string reason;  // one sentence for a person
  bool engine_available = true;
  std::optional<Runtime> runtime;
  // Capability problems, kept even when not activating so the caller can say
  // what to fix: no runtime, no engine (both fatal), bandwidth unknown (not
  // fatal: it only leaves the rate unknown).
  std::vector<std::string> blockers;
  std::vector<std::string> caveats;
};

// The policy: never -> off (kDisabled); auto with a conventional option ->
// off (kNotNeeded); otherwise always -> kManual, auto -> kFallback, on unless
// a fatal blocker stands (then off, the reason naming the first one).
Decision Decide(const DecideInput& input);

}  // namespace nightshift::planner
