// The worker daemon's vocabulary: what the scheduler leases to a worker and
// what the worker reports back, as plain structs. The gRPC session
// (session.h) converts wire messages to and from these; nothing else in the
// daemon sees a protobuf type.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/types.h"

namespace nightshift::worker {

// One leased job, with its prompt already tokenised by the scheduler.
struct JobAssignment {
  int64_t job_id = 0;
  std::string custom_id;
  std::vector<int32_t> prompt;
  std::vector<std::vector<int32_t>> label_ids;  // classification: one id list per label
  std::vector<std::string> labels;              // the label names, in the same order
  int32_t max_new_tokens = 16;
  api::Sampling sampling;
  std::vector<std::string> stop;  // stop strings, matched on the decoded text
  bool logprobs = false;
  int32_t top_logprobs = 0;
};

// A batch lease, or a top-up of the running batch `batch_id`.
struct BatchAssignment {
  int64_t batch_id = 0;
  std::string model;
  bool top_up = false;
  std::vector<JobAssignment> jobs;
};

// The scheduler asks to stop running these jobs (no result is sent).
struct CancelRequest {
  int64_t batch_id = 0;
  std::vector<int64_t> job_ids;
  std::string reason;
};

// A finished job: its output, or why it failed (it fails alone).
struct JobOutcome {
  int64_t batch_id = 0;
  int64_t job_id = 0;
  bool ok = false;
  api::JobOutput output;  // when ok
  std::string error;      // when !ok
};

}  // namespace nightshift::worker
