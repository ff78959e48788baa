// Conversions between the wire API (proto/nightshift.proto) and the
// scheduler's own types (types.h, scheduler.h). The contract's types convert
// in proto/wire.h and status codes map in proto/grpc_status.h; this is the
// only scheduler code besides the service that sees generated protobuf
// types. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "nightshift.pb.h"
#include "proto/wire.h"
#include "scheduler/scheduler.h"

namespace nightshift::scheduler::wire {

// The contract's conversions (JobRequest, JobOutput, TokenizerFiles, PassProgress, ...).
using api::wire::FromProto;
using api::wire::ToProto;

v1::JobState ToProto(JobState state);
// nullopt for JOB_STATE_UNSPECIFIED.
std::optional<JobState> FromProto(v1::JobState state);

SubmitRequest FromProto(const v1::SubmitJobsRequest& request);

// The most problems a CheckJobsResponse lists (the counts cover them all).
inline constexpr size_t kMaxProblemsListed = 1000;
// The first kMaxProblemsListed of `problems` and their counts.
void ToProto(const std::vector<JobProblem>& problems, v1::CheckJobsResponse* out);

void ToProto(const JobView& view, v1::Job* out);
void ToProto(const BatchStatus& batch, v1::BatchProgress* out);
void ToProto(const SubmissionStatus& status, v1::Submission* out);
void ToProto(const SubmissionUpdate& update, v1::SubmissionEvent* out);
void ToProto(const WorkerStatus& worker, v1::WorkerInfo* out);
void ToProto(const Estimate& estimate, v1::EstimateResponse* out);

JobResult FromProto(const v1::JobResultReport& report);
void ToProto(const WorkerCommand& command, v1::SchedulerMessage* out);

}  // namespace nightshift::scheduler::wire
