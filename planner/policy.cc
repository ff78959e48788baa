#include "planner/policy.h"

#include <cctype>
#include <string>

namespace nightshift::planner {
namespace {

struct Alias {
  const char* word;
  StreamingRequest request;
};

constexpr Alias kAliases[] = {
    {"auto", StreamingRequest::kAuto},   {"always", StreamingRequest::kAlways},
    {"on", StreamingRequest::kAlways},   {"true", StreamingRequest::kAlways},
    {"yes", StreamingRequest::kAlways},  {"1", StreamingRequest::kAlways},
    {"never", StreamingRequest::kNever}, {"off", StreamingRequest::kNever},
    {"false", StreamingRequest::kNever}, {"no", StreamingRequest::kNever},
    {"0", StreamingRequest::kNever},
};

std::string Trimmed(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

const char* StreamingRequestName(StreamingRequest request) {
  switch (request) {
    case StreamingRequest::kAuto:
      return "auto";
    case StreamingRequest::kAlways:
      return "always";
    case StreamingRequest::kNever:
      return "never";
  }
  return "auto";
}

StatusOr<StreamingRequest> ParseStreamingRequest(std::string_view value) {
  std::string key = Trimmed(value);
  if (key.empty()) return StreamingRequest::kAuto;
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Alias& alias : kAliases) {
    if (key == alias.word) return alias.request;
  }
  return InvalidArgument("streaming request must be auto, always or never, got '" +
                         std::string(value) + "'");
}

StatusOr<StreamingRequest> ResolveStreamingRequest(std::optional<std::string> explicit_value,
                                                   std::optional<std::string> env_value) {
  if (explicit_value && !explicit_value->empty()) return ParseStreamingRequest(*explicit_value);
  if (env_value) {
    StatusOr<StreamingRequest> parsed = ParseStreamingRequest(*env_value);
    if (!parsed.ok()) return parsed.status().Prefixed(kStreamingEnvVar);
    return parsed;
  }
  return StreamingRequest::kAuto;
}

const char* RuntimeName(Runtime runtime) {
  switch (runtime) {
    case Runtime::kCuda:
      return "cuda";
    case Runtime::kRocm:
      return "rocm";
    case Runtime::kMps:
      return "mps";
    case Runtime::kCpu:
      return "cpu";
  }
  return "cpu";
}

std::optional<Runtime> RuntimeFor(Accelerator accelerator, bool allow_cpu) {
  switch (accelerator) {
    case Accelerator::kCuda:
      return Runtime::kCuda;
    case Accelerator::kRocm:
      return Runtime::kRocm;
    case Accelerator::kMetal:
      return Runtime::kMps;
    case Accelerator::kCpu:
      break;
  }
  if (allow_cpu) return Runtime::kCpu;
  return std::nullopt;
}

std::vector<std::string> Caveats(std::optional<Runtime> runtime) {
  if (!runtime) return {};
  return {
      "only safetensors checkpoints stream: a pytorch_model.bin pickle would have to be read "
      "whole for every layer, so it is refused",
      "a mixture-of-experts layer is loaded with all its experts, so its resident size is the "
      "whole expert set, not the few experts a token is routed to",
  };
}

const char* TriggerName(Trigger trigger) {
  switch (trigger) {
    case Trigger::kManual:
      return "manual";
    case Trigger::kFallback:
      return "fallback";
    case Trigger::kDisabled:
      return "disabled";
    case Trigger::kNotNeeded:
      return "not-needed";
  }
  return "not-needed";
}

Decision Decide(const DecideInput& input) {
  Decision d;
  d.request = input.request;
  d.engine_available = input.engine_available;
  d.runtime = RuntimeFor(input.accelerator, input.allow_cpu);
  d.caveats = Caveats(d.runtime);

  std::vector<std::string> fatal;
  if (!d.runtime) {
    fatal.push_back(
        "no accelerator to stream on here (a CUDA or ROCm GPU, or Apple Silicon through "
        "Metal); the CPU path works but is slow enough that it has to be allowed explicitly");
  }
  if (!input.engine_available) {
    fatal.push_back("this binary was built without the streaming engine (libtorch)");
  }
  d.blockers = fatal;
  if (!input.read_gbs || !(*input.read_gbs > 0)) {
    d.blockers.push_back(
        "the disk read bandwidth is unknown, and it bounds the streaming rate: measure it "
        "with `nightshift disk-bench`");
  }

  if (input.request == StreamingRequest::kNever) {
    d.trigger = Trigger::kDisabled;
    d.reason = std::string("Layer streaming is switched off (") + kStreamingEnvVar +
               "=never or an explicit never).";
    return d;
  }
  if (input.request == StreamingRequest::kAuto && input.conventional_resolved) {
    d.trigger = Trigger::kNotNeeded;
    d.reason =
        "A model already fits this machine's memory whole, so streaming layers from disk would "
        "cost two "
        "to three orders of magnitude of speed for nothing; ask for always to override.";
    return d;
  }
  d.trigger = input.request == StreamingRequest::kAlways ? Trigger::kManual : Trigger::kFallback;
  if (!fatal.empty()) {
    d.reason = "Layer streaming cannot run here: " + fatal.front() + ".";
    return d;
  }
  d.activate = true;
  if (d.trigger == Trigger::kFallback) {
    d.reason =
        "Nothing fits this machine's memory whole, so streaming layers is the difference "
        "between running the model and not; expect seconds per token, not tokens per second.";
  } else {
    d.reason = std::string("Layer streaming was asked for and runs here on ") +
               RuntimeName(*d.runtime) + ".";
  }
  return d;
}

}  // namespace nightshift::planner
