// Conversions between the wire API (proto/nightshift.proto) and the domain
// types (types.h, scheduler.h), and the one place that maps Status codes to
// gRPC codes. The only scheduler code besides the service that sees
// generated protobuf types. Pure functions; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "nightshift.pb.h"
#include "scheduler/scheduler.h"

namespace nightshift::scheduler::wire {

// The one mapping of our codes to gRPC's.
grpc::Status ToGrpcStatus(const Status& status);

v1::JobState ToProto(JobState state);
// nullopt for JOB_STATE_UNSPECIFIED.
std::optional<JobState> FromProto(v1::JobState state);

// A job request as a spec. What cannot even be decoded (an unsupported url)
// goes into `problem`; ValidateJobs lists it with the rest.
JobSpec FromProto(const v1::JobRequest& request, std::string* problem);
SubmitRequest FromProto(const v1::SubmitJobsRequest& request);

void ToProto(const JobOutput& output, v1::JobOutput* out);
JobOutput FromProto(const v1::JobOutput& output);
void ToProto(const JobView& view, v1::Job* out);
void ToProto(const BatchStatus& batch, v1::BatchProgress* out);
void ToProto(const SubmissionStatus& status, v1::Submission* out);
void ToProto(const SubmissionUpdate& update, v1::SubmissionEvent* out);
void ToProto(const WorkerStatus& worker, v1::WorkerInfo* out);
void ToProto(const Estimate& estimate, v1::EstimateResponse* out);

WorkerHello FromProto(const v1::WorkerHello& hello);
TokenizerFiles FromProto(const v1::TokenizerUpload& upload);
PassProgress FromProto(const v1::PassReport& report);
JobResult FromProto(const v1::JobResultReport& report);
void ToProto(const WorkerCommand& command, v1::SchedulerMessage* out);

}  // namespace nightshift::scheduler::wire
