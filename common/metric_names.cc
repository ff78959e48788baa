#include "common/metric_names.h"

#include <algorithm>
#include <stdexcept>

namespace nightshift::metrics {
namespace {

// Passes take from well under a second (a small resident model) to many
// minutes (a 400B checkpoint streamed from one disk).
const std::vector<double> kPassBuckets = {0.05, 0.1, 0.25, 0.5, 1,   2.5,  5,   10,
                                          25,   50,  100,  250, 500, 1000, 2500};
// A job waits and runs from seconds to an overnight queue.
const std::vector<double> kJobBuckets = {1,    5,    10,    30,    60,    300,   600,   1800,
                                         3600, 7200, 14400, 28800, 57600, 86400, 172800};
const std::vector<double> kSequenceBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
const std::vector<double> kTokenBuckets = {1,    4,     16,    64,     256,    1024,
                                           4096, 16384, 65536, 262144, 1048576};
// Signed relative error of an ETA: (shown - actual) / actual; below -1 cannot
// happen (an ETA is never negative), above +1 falls in +Inf.
const std::vector<double> kRelativeErrorBuckets = {-1,   -0.5, -0.25, -0.15, -0.1, -0.05, 0,
                                                   0.05, 0.1,  0.15,  0.25,  0.5,  1};
const std::vector<double> kRpcBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,    1,     2.5,  5,     10};

const std::vector<std::string> kNoValues;
const std::vector<std::string> kStates = {"queued",    "leased", "running",
                                          "succeeded", "failed", "cancelled"};
const std::vector<std::string> kOutcomes = {"succeeded", "failed", "cancelled"};
const std::vector<std::string> kModes = {"streaming", "resident"};
// engine::PassStats::compute_dtype.
const std::vector<std::string> kComputes = {"f32", "bf16", "mixed", "accelerator"};
// scheduler/eta_tracker.h's kEtaMilestones.
const std::vector<std::string> kProgress = {"10", "25", "50", "75", "90"};

constexpr prometheus::MetricType C = prometheus::MetricType::Counter;
constexpr prometheus::MetricType G = prometheus::MetricType::Gauge;
constexpr prometheus::MetricType H = prometheus::MetricType::Histogram;
constexpr Exporter W = Exporter::kWorker;
constexpr Exporter S = Exporter::kScheduler;

std::vector<MetricDef> MakeCatalogue() {
  using namespace names;
  const std::vector<std::string> mw = {"model", "worker"};
  return {
      {kPassDurationSeconds,
       H,
       "Wall time of one pass through every layer of the checkpoint; mode says whether the "
       "layers were streamed from disk or resident.",
       {"model", "worker", "mode"},
       kPassBuckets,
       W},
      {kLayerLoadSecondsTotal,
       C,
       "Seconds spent reading layer weights from the checkpoint (the prefetch thread; overlaps "
       "compute).",
       mw,
       {},
       W},
      {kLayerComputeSecondsTotal,
       C,
       "Seconds spent computing layers for the sequences in flight.",
       mw,
       {},
       W},
      {kIoWaitSecondsTotal,
       C,
       "Seconds the compute thread waited for layer weights to be read.",
       mw,
       {},
       W},
      {kCheckpointReadBytesTotal,
       C,
       "Checkpoint bytes read from the safetensors files.",
       mw,
       {},
       W},
      {kReadThroughputBytesPerSecond,
       G,
       "Checkpoint bytes read per second of wall time during the last pass.",
       mw,
       {},
       W},
      {kReadBandwidthBytesPerSecond,
       G,
       "The worker's measured cold-cache read bandwidth with parallel reads (its physical "
       "limit), as disk-bench reports it.",
       {"worker"},
       {},
       W},
      {kPassSequences, H, "Sequences in flight in one pass.", mw, kSequenceBuckets, W},
      {kPassTokens, H,
       "Tokens computed in one pass (prompts and labels, a prefix shared by several sequences "
       "once, plus one per decoding sequence).",
       mw, kTokenBuckets, W},
      {kPromptTokensTotal,
       C,
       "Prompt tokens (label tokens included) run through the model.",
       mw,
       {},
       W},
      {kGeneratedTokensTotal, C, "Tokens generated.", mw, {}, W},
      {kPassTokensComputedTotal,
       C,
       "Tokens the passes computed: prompts and labels with each prefix that several sequences "
       "of a pass share computed once, plus one per decoding sequence. Against prompt plus "
       "generated tokens it shows what shared prefixes saved.",
       mw,
       {},
       W},
      {kSharedPrefixTokensTotal,
       C,
       "Of the tokens computed, those computed once for two or more sequences of a pass (their "
       "shared prefixes).",
       mw,
       {},
       W},
      {kKvBudgetBytes, G, "Memory the worker can give to the KV cache.", {"worker"}, {}, W},
      {kKvInUseBytes, G, "KV cache bytes reserved by the sequences in flight.", {"worker"}, {}, W},
      {kPinnedBytes,
       G,
       "Checkpoint bytes kept in memory across passes (partial residency: the pinned groups, "
       "and a GPU's host tier), as of the model's last pass; a pass streams the rest.",
       mw,
       {},
       W},
      {kPassesByComputeTotal,
       C,
       "Passes by what their projections computed in: f32, bf16, mixed (BF16 at some row "
       "counts) or accelerator (a GPU, in the weights' dtype).",
       {"model", "worker", "compute"},
       {},
       W},
      {kProjectionFlopsTotal,
       C,
       "FLOPs of the passes' projections (every layer's at the tokens fed, the LM head's at the "
       "rows it ran); over layer compute seconds, the compute rate reached.",
       {"model", "worker"},
       {},
       W},
      {kCheckpointReadErrorsTotal,
       C,
       "Passes that failed because a read of the checkpoint failed (an I/O error, a short "
       "read); each handed its batch's jobs back and made the model unhealthy for a while.",
       mw,
       {},
       W},
      {kModelUnhealthy,
       G,
       "1 while the worker offers the model to no batch because a read of its checkpoint failed "
       "mid-pass (until --unhealthy-seconds pass), else 0.",
       mw,
       {},
       W},
      {kExpertsRoutedTotal,
       C,
       "Mixtures of experts: experts the passes' rows routed to, counted once per sparse layer "
       "and pass (a pass's union over its rows).",
       mw,
       {},
       W},
      {kExpertsReadTotal,
       C,
       "Mixtures of experts: experts whose bytes the passes read from the checkpoint (routed ones "
       "not kept in memory, or a whole slice read ahead of the routing), per sparse layer and "
       "pass.",
       mw,
       {},
       W},
      {kExpertsPinned,
       G,
       "Mixtures of experts: experts kept in memory across passes (pinned under the memory "
       "budget, or every one when resident), over all sparse layers, at the last pass.",
       mw,
       {},
       W},
      {kJobs, G, "Jobs by state.", {"model", "state"}, {}, S},
      {kJobsSubmittedTotal, C, "Jobs accepted by SubmitJobs.", {"model"}, {}, S},
      {kJobsFinishedTotal,
       C,
       "Jobs that reached a terminal state, by outcome.",
       {"model", "outcome"},
       {},
       S},
      {kJobQueueSeconds,
       H,
       "Seconds from a job's submission to its first lease.",
       {"model"},
       kJobBuckets,
       S},
      {kJobEndToEndSeconds,
       H,
       "Seconds from a job's submission to its terminal state.",
       {"model"},
       kJobBuckets,
       S},
      {kJobRetriesTotal,
       C,
       "Jobs returned to the queue after their lease was lost or their worker could not run "
       "them (a checkpoint read failed mid-pass).",
       {"model"},
       {},
       S},
      {kLeaseExpirationsTotal,
       C,
       "Leases that expired without the worker finishing the batch.",
       mw,
       {},
       S},
      {kResultsRefusedTotal,
       C,
       "Results refused because the job already had one or the lease was no longer current.",
       mw,
       {},
       S},
      {kWorkersAttached, G, "Workers attached to the scheduler.", {}, {}, S},
      {kSubmissionEtaSeconds,
       G,
       "Estimated seconds until the running submissions' remaining jobs of this model finish "
       "(the latest ETA among them).",
       {"model"},
       {},
       S},
      {kSubmitDurationSeconds,
       H,
       "Seconds the scheduler took to answer one SubmitJobs call.",
       {},
       kRpcBuckets,
       S},
      {kSchedulerDiskFullTotal,
       C,
       "Writes the scheduler refused because its disk was full (SQLite's SQLITE_FULL, ENOSPC on "
       "an upload or a tokenizer file); each refused its request whole and was logged.",
       {},
       {},
       S},
      {kHttpClientTimeoutsTotal,
       C,
       "Batch API connections closed because the client stalled: no byte either way for "
       "--http-timeout-seconds (an upload stopped mid-body, an answer not read) or a request "
       "header slower than that; each was logged with the client's address.",
       {},
       {},
       S},
      {kEtaRelativeErrorRatio,
       H,
       "Signed relative error (shown - actual) / actual of the ETA a submission showed when "
       "`progress` percent of its jobs were done, observed when it ends.",
       {"progress"},
       kRelativeErrorBuckets,
       S},
  };
}

}  // namespace

const std::vector<MetricDef>& Catalogue() {
  static const std::vector<MetricDef> catalogue = MakeCatalogue();
  return catalogue;
}

const MetricDef* FindMetric(std::string_view name) {
  for (const MetricDef& def : Catalogue()) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

const std::vector<std::string>& AllowedLabelValues(std::string_view label) {
  if (label == "state") return kStates;
  if (label == "outcome") return kOutcomes;
  if (label == "mode") return kModes;
  if (label == "compute") return kComputes;
  if (label == "progress") return kProgress;
  return kNoValues;
}

const char* MetricTypeName(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter:
      return "counter";
    case prometheus::MetricType::Gauge:
      return "gauge";
    case prometheus::MetricType::Summary:
      return "summary";
    case prometheus::MetricType::Untyped:
      return "untyped";
    case prometheus::MetricType::Histogram:
      return "histogram";
  }
  return "untyped";
}

const MetricDef& CatalogueDef(std::string_view name, prometheus::MetricType type) {
  const MetricDef* def = FindMetric(name);
  if (def == nullptr) {
    throw std::invalid_argument("metric '" + std::string(name) + "' is not in the catalogue");
  }
  if (def->type != type) {
    throw std::invalid_argument("metric '" + std::string(name) + "' is a " +
                                MetricTypeName(def->type) + ", not a " + MetricTypeName(type));
  }
  return *def;
}

void CheckCatalogueLabels(const MetricDef& def, const prometheus::Labels& labels) {
  const bool same_names =
      labels.size() == def.labels.size() &&
      std::all_of(def.labels.begin(), def.labels.end(),
                  [&](const std::string& name) { return labels.count(name) > 0; });
  if (!same_names) {
    std::string expected;
    for (const std::string& name : def.labels) expected += (expected.empty() ? "" : ",") + name;
    throw std::invalid_argument("metric '" + std::string(def.name) + "' takes the labels {" +
                                expected + "}");
  }
  for (const auto& [name, value] : labels) {
    const std::vector<std::string>& allowed = AllowedLabelValues(name);
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
      throw std::invalid_argument("'" + value + "' is not a value of label '" + name + "'");
    }
  }
}

}  // namespace nightshift::metrics
