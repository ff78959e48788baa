// The one set of conversions between the contract's plain types
// (proto/types.h) and their wire messages (proto/nightshift.proto). The
// scheduler's service and the worker's session both call these, so a field
// added to a message is converted in exactly one place; each side converts
// only the messages that carry its own types (job views, leases) itself.
//
// Pure functions; thread-safe.
#pragma once

#include "nightshift.pb.h"
#include "proto/types.h"

namespace nightshift::api::wire {

// Fields a request leaves unset take the API's defaults (Sampling's); a
// missing seed stays has_seed = false.
Sampling FromProto(const v1::Sampling& sampling);
void ToProto(const Sampling& sampling, v1::Sampling* out);

// A job request as a spec, and back. What cannot even be decoded (an
// unsupported url) goes into `problem`; the scheduler's ValidateJobs lists it
// with the rest. A spec's max_new_tokens 0 travels as 0 (the server's default).
JobSpec FromProto(const v1::JobRequest& request, std::string* problem);
void ToProto(const JobSpec& spec, v1::JobRequest* out);

JobOutput FromProto(const v1::JobOutput& output);
void ToProto(const JobOutput& output, v1::JobOutput* out);

ModelOffer FromProto(const v1::ModelAdvert& advert);
void ToProto(const ModelOffer& offer, v1::ModelAdvert* out);

TokenizerFiles FromProto(const v1::TokenizerUpload& upload);
void ToProto(const TokenizerFiles& files, v1::TokenizerUpload* out);

PassProgress FromProto(const v1::PassReport& report);
void ToProto(const PassProgress& pass, v1::PassReport* out);

// The hello. Of its WorkerInfo, session, connected and last_seen_at_ms are
// the scheduler store's and do not travel.
WorkerHello FromProto(const v1::WorkerHello& hello);
void ToProto(const WorkerHello& hello, v1::WorkerHello* out);

}  // namespace nightshift::api::wire
