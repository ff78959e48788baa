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
    const v1::Sampling& s = j.sampling();
    job.sampling.temperature = s.has_temperature() ? s.temperature() : 1.0;
    job.sampling.top_p = s.has_top_p() ? s.top_p() : 1.0;
    job.sampling.top_k = s.top_k();
    job.sampling.has_seed = true;
    job.sampling.seed = s.has_seed() ? s.seed() : static_cast<uint64_t>(j.job_id());
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

void ToProto(const scheduler::PassProgress& p, v1::PassReport* out) {
  out->set_batch_id(p.batch_id);
  out->set_pass_index(p.pass_index);
  out->set_seconds(p.seconds);
  out->set_bytes_read(p.bytes_read);
  out->set_io_wait_seconds(p.io_wait_seconds);
  out->set_sequences(p.sequences);
  out->set_tokens(p.tokens);
  out->set_mode(p.mode);
  for (const auto& [job, generated] : p.generated) (*out->mutable_generated())[job] = generated;
  out->set_free_kv_bytes(p.free_kv_bytes);
  out->set_want_top_up(p.want_top_up);
}

void ToProto(const JobOutcome& outcome, v1::JobResultReport* out) {
  out->set_batch_id(outcome.batch_id);
  out->set_job_id(outcome.job_id);
  if (!outcome.ok) {
    out->set_error(outcome.error);
    return;
  }
  const scheduler::JobOutput& o = outcome.output;
  v1::JobOutput* w = out->mutable_output();
  w->set_text(o.text);
  for (int32_t id : o.token_ids) w->add_token_ids(id);
  w->set_finish_reason(o.finish_reason);
  w->set_prompt_tokens(o.prompt_tokens);
  w->set_completion_tokens(o.completion_tokens);
  for (const scheduler::TokenLogprob& lp : o.logprobs) {
    v1::TokenLogprob* l = w->add_logprobs();
    l->set_token(lp.token);
    l->set_text(lp.text);
    l->set_logprob(lp.logprob);
    for (const scheduler::TopLogprob& top : lp.top) {
      v1::TopLogprob* t = l->add_top();
      t->set_token(top.token);
      t->set_text(top.text);
      t->set_logprob(top.logprob);
    }
  }
  for (const scheduler::LabelScore& label : o.labels) {
    v1::LabelScore* l = w->add_labels();
    l->set_label(label.label);
    l->set_logprob(label.logprob);
  }
}

void ToProto(const scheduler::ModelOffer& m, v1::ModelAdvert* out) {
  out->set_name(m.name);
  out->set_kv_bytes_per_token(m.kv_bytes_per_token);
  out->set_checkpoint_bytes(m.checkpoint_bytes);
  out->set_seconds_per_pass(m.seconds_per_pass);
  out->set_max_context_tokens(m.max_context_tokens);
  out->set_tokenizer_hash(m.tokenizer_hash);
}

void ToProto(const scheduler::TokenizerFiles& files, v1::TokenizerUpload* out) {
  for (const auto& [name, content] : files.files) (*out->mutable_files())[name] = content;
  for (int32_t id : files.eos_ids) out->add_eos_ids(id);
}

void ToProto(const scheduler::WorkerInfo& info, v1::WorkerHello* out) {
  out->set_worker_id(info.id);
  out->set_device(info.device);
  out->set_memory_budget_bytes(info.memory_budget_bytes);
  out->set_kv_budget_bytes(info.kv_budget_bytes);
  out->set_read_bytes_per_second(info.read_bytes_per_second);
  out->set_max_batch_jobs(info.max_batch_jobs);
  for (const scheduler::ModelOffer& m : info.models) ToProto(m, out->add_models());
}

}  // namespace nightshift::worker::wire
