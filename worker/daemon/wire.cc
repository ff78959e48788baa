#include "worker/daemon/wire.h"

namespace nightshift::worker::wire {

BatchAssignment FromProto(const v1::BatchAssignment& assign) {
  BatchAssignment out;
  out.batch_id = assign.batch_id();
  out.model = assign.model();
  out.top_up = assign.top_up();
  for (const v1::JobAssignment& j : assign.jobs()) {
    JobAssignment job;
    job.job_id = j.job_id();
    job.custom_id = j.custom_id();
    job.prompt.assign(j.prompt_token_ids().begin(), j.prompt_token_ids().end());
    for (const v1::TokenIds& label : j.label_token_ids()) {
      job.label_ids.emplace_back(label.ids().begin(), label.ids().end());
    }
    job.labels.assign(j.labels().begin(), j.labels().end());
    job.max_new_tokens = j.max_new_tokens();
    job.sampling = FromProto(j.sampling());
    if (!job.sampling.has_seed) job.sampling.seed = static_cast<uint64_t>(j.job_id());
    job.sampling.has_seed = true;
    job.stop.assign(j.stop().begin(), j.stop().end());
    job.logprobs = j.logprobs();
    job.top_logprobs = j.top_logprobs();
    out.jobs.push_back(std::move(job));
  }
  return out;
}

CancelRequest FromProto(const v1::CancelJobs& cancel) {
  CancelRequest out;
  out.batch_id = cancel.batch_id();
  out.job_ids.assign(cancel.job_ids().begin(), cancel.job_ids().end());
  out.reason = cancel.reason();
  return out;
}

void ToProto(const JobOutcome& outcome, v1::JobResultReport* out) {
  out->set_batch_id(outcome.batch_id);
  out->set_job_id(outcome.job_id);
  if (!outcome.ok) {
    out->set_error(outcome.error);
    return;
  }
  ToProto(outcome.output, out->mutable_output());
}

}  // namespace nightshift::worker::wire
