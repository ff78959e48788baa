#include "cli/client/batch_output.h"

#include "proto/batch_format.h"
#include "proto/wire.h"

namespace nightshift::cli {

bool IsFinished(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_SUCCEEDED || job.state() == v1::JOB_STATE_FAILED ||
         job.state() == v1::JOB_STATE_CANCELLED;
}

nlohmann::ordered_json BatchOutputLine(const v1::Job& job) {
  api::ResultLine line;
  line.job_id = job.id();
  line.custom_id = job.custom_id();
  line.model = job.model();
  line.endpoint = job.url() == "/v1/chat/completions" ? api::Endpoint::kChatCompletions
                                                      : api::Endpoint::kCompletions;
  line.finished_at_ms = job.updated_at_ms();
  switch (job.state()) {
    case v1::JOB_STATE_SUCCEEDED:
      line.outcome = api::LineOutcome::kSucceeded;
      line.output = api::wire::FromProto(job.output());
      break;
    case v1::JOB_STATE_CANCELLED:
      line.outcome = api::LineOutcome::kCancelled;
      break;
    default:
      line.outcome = api::LineOutcome::kFailed;
      break;
  }
  if (line.outcome != api::LineOutcome::kSucceeded) {
    line.error = !job.error().empty() ? job.error() : job.reason();
  }
  return api::BatchOutputLine(line);
}

}  // namespace nightshift::cli
