#include "scheduler/wire.h"

namespace nightshift::scheduler::wire {

using api::wire::FromProto;
using api::wire::ToProto;

v1::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return v1::JOB_STATE_QUEUED;
    case JobState::kLeased:
      return v1::JOB_STATE_LEASED;
    case JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case JobState::kSucceeded:
      return v1::JOB_STATE_SUCCEEDED;
    case JobState::kFailed:
      return v1::JOB_STATE_FAILED;
    case JobState::kCancelled:
      return v1::JOB_STATE_CANCELLED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

std::optional<JobState> FromProto(v1::JobState state) {
  for (JobState s : kAllJobStates) {
    if (ToProto(s) == state) return s;
  }
  return std::nullopt;
}

namespace {

void ToProto(const ModelOffer& m, double measured, v1::ModelInfo* out) {
  out->set_name(m.name);
  out->set_kv_bytes_per_token(m.kv_bytes_per_token);
  out->set_checkpoint_bytes(m.checkpoint_bytes);
  out->set_seconds_per_pass(m.seconds_per_pass);
  out->set_max_context_tokens(m.max_context_tokens);
  out->set_tokenizer_hash(m.tokenizer_hash);
  out->set_measured_seconds_per_pass(measured);
  out->set_pass_token_budget(m.pass_token_budget);
  out->set_unhealthy(m.unhealthy);
}

}  // namespace

SubmitRequest FromProto(const v1::SubmitJobsRequest& request) {
  SubmitRequest out;
  out.submission_id = request.submission_id();
  out.keep_open = request.keep_open();
  out.idempotency_key = request.idempotency_key();
  out.request_bytes = static_cast<int64_t>(request.ByteSizeLong());
  for (const auto& job : request.jobs()) {
    std::string problem;
    out.jobs.push_back(FromProto(job, &problem));
    out.decode_problems.push_back(std::move(problem));
  }
  return out;
}

void ToProto(const std::vector<JobProblem>& problems, v1::CheckJobsResponse* out) {
  for (size_t i = 0; i < problems.size() && i < kMaxProblemsListed; ++i) {
    v1::JobProblem* p = out->add_problems();
    p->set_index(static_cast<int64_t>(problems[i].index));
    p->set_reason(problems[i].reason);
  }
  out->set_problem_count(static_cast<int64_t>(problems.size()));
  out->set_bad_jobs(static_cast<int64_t>(CountBadJobs(problems)));
}

void ToProto(const JobView& view, v1::Job* out) {
  const Job& job = view.job;
  out->set_id(job.id);
  out->set_submission_id(job.submission_id);
  out->set_index(job.index);
  out->set_custom_id(job.spec.custom_id);
  out->set_model(job.spec.model);
  out->set_url(EndpointUrl(job.spec.endpoint));
  out->set_state(ToProto(job.state));
  out->set_attempt(job.attempt);
  out->set_max_attempts(job.max_attempts);
  out->set_reason(job.reason);
  out->set_worker_id(job.worker_id);
  out->set_batch_id(job.batch_id);
  out->set_tokenised(job.tokenised);
  out->set_prompt_tokens(static_cast<int64_t>(job.tokens.prompt.size()));
  out->set_kv_tokens(job.kv_tokens);
  out->set_max_new_tokens(job.spec.max_new_tokens);
  for (const auto& label : job.spec.labels) out->add_labels(label);
  out->set_priority(job.spec.priority);
  out->set_created_at_ms(job.created_at_ms);
  out->set_updated_at_ms(job.updated_at_ms);
  if (view.result && view.result->ok) {
    ToProto(view.result->output, out->mutable_output());
  } else if (view.result) {
    out->set_error(view.result->error);
  } else if (job.state == JobState::kFailed || job.state == JobState::kCancelled) {
    out->set_error(job.reason);
  }
}

void ToProto(const BatchStatus& b, v1::BatchProgress* out) {
  out->set_batch_id(b.batch_id);
  out->set_worker_id(b.worker_id);
  out->set_model(b.model);
  out->set_mode(b.mode);
  out->set_passes_done(b.passes_done);
  out->set_seconds_per_pass(b.seconds_per_pass);
  out->set_last_pass_seconds(b.last_pass_seconds);
  out->set_sequences(b.sequences);
  out->set_jobs(b.jobs);
  out->set_eta_seconds_per_pass(b.eta_seconds_per_pass);
  out->set_eta_passes_measured(b.eta_passes_measured);
}

void ToProto(const SubmissionStatus& status, v1::Submission* out) {
  const Submission& s = status.submission;
  out->set_id(s.id);
  out->set_created_at_ms(s.created_at_ms);
  out->set_sealed(s.sealed);
  out->set_done(s.done());
  auto* c = out->mutable_counts();
  c->set_queued(s.counts.queued);
  c->set_leased(s.counts.leased);
  c->set_running(s.counts.running);
  c->set_succeeded(s.counts.succeeded);
  c->set_failed(s.counts.failed);
  c->set_cancelled(s.counts.cancelled);
  c->set_total(s.counts.total());
  if (status.eta_seconds) out->set_eta_seconds(*status.eta_seconds);
  for (const auto& batch : status.batches) ToProto(batch, out->add_batches());
  out->set_waiting_for_tokenizer(status.waiting_for_tokenizer);
  if (status.prompt_tokens) {
    auto* p = out->mutable_prompt_tokens();
    p->set_jobs(status.prompt_tokens->jobs);
    p->set_prompt_tokens(status.prompt_tokens->prompt_tokens);
    p->set_cached_prompt_tokens(status.prompt_tokens->cached_prompt_tokens);
  }
}

void ToProto(const SubmissionUpdate& update, v1::SubmissionEvent* out) {
  ToProto(update.status, out->mutable_submission());
  for (const JobChange& c : update.changes) {
    auto* change = out->add_changes();
    change->set_job_id(c.job_id);
    change->set_from(ToProto(c.from));
    change->set_to(ToProto(c.to));
    change->set_reason(c.reason);
    change->set_worker_id(c.worker_id);
  }
}

void ToProto(const WorkerStatus& w, v1::WorkerInfo* out) {
  out->set_id(w.info.id);
  out->set_device(w.info.device);
  out->set_memory_budget_bytes(w.info.memory_budget_bytes);
  out->set_kv_budget_bytes(w.info.kv_budget_bytes);
  out->set_read_bytes_per_second(w.info.read_bytes_per_second);
  out->set_max_batch_jobs(w.info.max_batch_jobs);
  out->set_connected(w.info.connected);
  out->set_draining(w.draining);
  out->set_last_seen_at_ms(w.info.last_seen_at_ms);
  out->set_open_model(w.info.open_model);
  out->set_cgroup_memory_limit_bytes(w.info.cgroup_memory_limit_bytes);
  for (const ModelOffer& m : w.info.models) {
    auto measured = w.measured_seconds_per_pass.find(m.name);
    ToProto(m, measured == w.measured_seconds_per_pass.end() ? 0 : measured->second,
            out->add_models());
  }
  out->set_busy(w.batch.has_value());
  if (w.batch) ToProto(*w.batch, out->mutable_batch());
}

void ToProto(const Estimate& e, v1::EstimateResponse* out) {
  out->set_model(e.model);
  for (const ModelEstimate& w : e.workers) {
    auto* x = out->add_workers();
    x->set_worker_id(w.worker_id);
    x->set_connected(w.connected);
    ToProto(w.offer, w.measured ? w.seconds_per_pass : 0, x->mutable_model());
    x->set_seconds_per_pass(w.seconds_per_pass);
    x->set_measured(w.measured);
    x->set_jobs_per_batch(w.jobs_per_batch);
  }
  if (e.seconds) out->set_seconds(*e.seconds);
  out->set_queued_ahead(e.queued_ahead);
}

JobResult FromProto(const v1::JobResultReport& r) {
  JobResult out;
  out.batch_id = r.batch_id();
  out.job_id = r.job_id();
  out.ok = r.outcome_case() == v1::JobResultReport::kOutput;
  if (out.ok) {
    out.output = FromProto(r.output());
  } else {
    out.error = r.error().empty() ? "the worker reported a failure without a reason" : r.error();
  }
  return out;
}

void ToProto(const WorkerCommand& c, v1::SchedulerMessage* out) {
  switch (c.kind) {
    case WorkerCommand::Kind::kWelcome: {
      auto* w = out->mutable_welcome();
      w->set_session(c.session);
      w->set_lease_seconds(static_cast<double>(c.lease_ms) / 1000.0);
      w->set_heartbeat_seconds(static_cast<double>(c.heartbeat_ms) / 1000.0);
      for (const auto& hash : c.missing_tokenizers) w->add_missing_tokenizers(hash);
      break;
    }
    case WorkerCommand::Kind::kAssign: {
      auto* a = out->mutable_assign();
      a->set_batch_id(c.batch_id);
      a->set_model(c.model);
      a->set_lease_expires_at_ms(c.lease_expires_at_ms);
      a->set_top_up(c.top_up);
      for (const Job& job : c.jobs) {
        auto* j = a->add_jobs();
        j->set_job_id(job.id);
        j->set_custom_id(job.spec.custom_id);
        j->set_url(EndpointUrl(job.spec.endpoint));
        j->mutable_prompt_token_ids()->Assign(job.tokens.prompt.begin(), job.tokens.prompt.end());
        for (const auto& label : job.tokens.labels) {
          j->add_label_token_ids()->mutable_ids()->Assign(label.begin(), label.end());
        }
        for (const auto& label : job.spec.labels) j->add_labels(label);
        j->set_max_new_tokens(job.spec.max_new_tokens);
        ToProto(job.spec.sampling, j->mutable_sampling());
        for (const auto& stop : job.spec.stop) j->add_stop(stop);
        j->set_logprobs(job.spec.logprobs);
        j->set_top_logprobs(job.spec.top_logprobs);
        j->set_attempt(job.attempt);
      }
      break;
    }
    case WorkerCommand::Kind::kCancel: {
      auto* x = out->mutable_cancel();
      x->set_batch_id(c.batch_id);
      x->mutable_job_ids()->Assign(c.job_ids.begin(), c.job_ids.end());
      x->set_reason(c.reason);
      break;
    }
    case WorkerCommand::Kind::kResultsStored:
      out->mutable_stored()->mutable_job_ids()->Assign(c.job_ids.begin(), c.job_ids.end());
      break;
  }
}

}  // namespace nightshift::scheduler::wire
