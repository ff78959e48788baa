// Conversions between the WorkerService wire messages (proto/nightshift.proto)
// and the daemon's plain structs (types.h, scheduler/types.h). The only
// place in the daemon besides session.cc that sees protobuf types.
//
// Pure and thread-safe.
#pragma once

#include "nightshift.pb.h"
#include "worker/daemon/types.h"

namespace nightshift::worker::wire {

// Sampling fields the scheduler left unset take the API's defaults
// (temperature 1, top_p 1); a missing seed becomes the job id, so a rerun of
// the same job samples the same tokens.
BatchAssignment FromProto(const v1::BatchAssignment& assign);
CancelRequest FromProto(const v1::CancelJobs& cancel);

void ToProto(const scheduler::PassProgress& pass, v1::PassReport* out);
void ToProto(const JobOutcome& outcome, v1::JobResultReport* out);
void ToProto(const scheduler::ModelOffer& offer, v1::ModelAdvert* out);
void ToProto(const scheduler::TokenizerFiles& files, v1::TokenizerUpload* out);
// The hello's fixed part (everything but running_batches, open_model and
// version, which the session fills).
void ToProto(const scheduler::WorkerInfo& info, v1::WorkerHello* out);

}  // namespace nightshift::worker::wire
