// Conversions between the WorkerService wire messages (proto/nightshift.proto)
// and the daemon's own plain structs (types.h): leases, cancels and results.
// The contract's shared types (pass progress, model offers, tokenizer files,
// the hello) convert in proto/wire.h. The only place in the daemon besides
// session.cc that sees protobuf types.
//
// Pure and thread-safe.
#pragma once

#include "nightshift.pb.h"
#include "proto/wire.h"
#include "worker/daemon/types.h"

namespace nightshift::worker::wire {

// The contract's conversions (PassProgress, ModelOffer, WorkerInfo, ...).
using api::wire::FromProto;
using api::wire::ToProto;

// Sampling fields the scheduler left unset take the API's defaults
// (api::wire::FromProto of the sampling); a missing seed becomes the job id,
// so a rerun of the same job samples the same tokens.
BatchAssignment FromProto(const v1::BatchAssignment& assign);
CancelRequest FromProto(const v1::CancelJobs& cancel);

void ToProto(const JobOutcome& outcome, v1::JobResultReport* out);

}  // namespace nightshift::worker::wire
