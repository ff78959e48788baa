// Small pieces the scheduler commands share: proto messages as JSON for
// --json, server errors as exit codes, argument parsing of ids.
//
// Thread-safe (no state).
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <string>

#include "common/command_line.h"
#include "common/status.h"

namespace nightshift::cli {

// The message in proto3's JSON mapping with the .proto field names, every
// field printed (defaults too), on one line. int64 values are JSON strings,
// as that mapping prescribes.
std::string MessageJson(const google::protobuf::Message& message);

// Prints "nightshift COMMAND: what: message" for a failed call and returns
// 1 (the work failed; a server's INVALID_ARGUMENT is not a usage error).
int CallFailed(const char* command, const std::string& what, const grpc::Status& status);

// A positive id from a positional argument; InvalidArgument naming `what`.
StatusOr<int64_t> ParseId(const std::string& text, const std::string& what);

// What every command taking a SUBMISSION says about it in --help.
inline constexpr const char kSubmissionHelp[] =
    "SUBMISSION is the id `submit` printed, or batch_<id> as the HTTP Batch API names the "
    "same submission.\n";

// A submission id as a user gives it: "7", or "batch_7" as the HTTP Batch
// API names the same submission. InvalidArgument otherwise.
StatusOr<int64_t> ParseSubmissionId(const std::string& text);

// The single positional argument; InvalidArgument when there are none or
// several ("give one SUBMISSION").
StatusOr<std::string> OnePositional(const std::vector<std::string>& positional,
                                    const std::string& what);

// What `status` and `cancel` act on: a submission (the positional
// argument) or one job (--job ID, `job_id` > 0); exactly one of the ids is set.
struct SubmissionOrJob {
  int64_t submission_id = 0;
  int64_t job_id = 0;
};
// InvalidArgument when both, neither, or a non-positive id is given.
StatusOr<SubmissionOrJob> PickSubmissionOrJob(const CommandLine& flags, int64_t job_id);

// Milliseconds since the Unix epoch, from the system clock.
int64_t NowMs();

}  // namespace nightshift::cli
