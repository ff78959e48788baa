#include "cli/client/command_util.h"

#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <iostream>

#include "proto/client.h"

namespace nightshift::cli {

std::string MessageJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  const auto status = google::protobuf::util::MessageToJsonString(message, &text, options);
  return status.ok() ? text : "{}";
}

int CallFailed(const char* command, const std::string& what, const grpc::Status& status) {
  std::cerr << "nightshift " << command << ": " << what << ": "
            << api::FromGrpcStatus(status).message() << "\n";
  return 1;
}

StatusOr<int64_t> ParseId(const std::string& text, const std::string& what) {
  size_t used = 0;
  int64_t id = 0;
  try {
    id = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || id <= 0) {
    return InvalidArgument(what + " '" + text + "' is not a positive id");
  }
  return id;
}

StatusOr<int64_t> ParseSubmissionId(const std::string& text) {
  constexpr std::string_view kBatch = "batch_";
  const bool batch = text.compare(0, kBatch.size(), kBatch) == 0;
  auto id = ParseId(batch ? text.substr(kBatch.size()) : text, "SUBMISSION");
  if (!id.ok()) {
    return InvalidArgument("SUBMISSION '" + text + "' is not a submission id (7, or batch_7)");
  }
  return id;
}

StatusOr<std::string> OnePositional(const std::vector<std::string>& positional,
                                    const std::string& what) {
  if (positional.size() != 1) {
    return InvalidArgument("give one " + what + (positional.empty() ? "" : ", not several"));
  }
  return positional[0];
}

StatusOr<SubmissionOrJob> PickSubmissionOrJob(const CommandLine& flags, int64_t job_id) {
  if (flags.Seen("job")) {
    if (!flags.positional().empty() || job_id <= 0) {
      return InvalidArgument("give either SUBMISSION or --job with a positive ID");
    }
    return SubmissionOrJob{0, job_id};
  }
  NS_ASSIGN_OR_RETURN(std::string text,
                      OnePositional(flags.positional(), "SUBMISSION (or --job ID)"));
  NS_ASSIGN_OR_RETURN(int64_t id, ParseSubmissionId(text));
  return SubmissionOrJob{id, 0};
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace nightshift::cli
