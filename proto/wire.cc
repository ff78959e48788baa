#include "proto/wire.h"

namespace nightshift::api::wire {

Sampling FromProto(const v1::Sampling& s) {
  Sampling out;
  if (s.has_temperature()) out.temperature = s.temperature();
  if (s.has_top_p()) out.top_p = s.top_p();
  out.top_k = s.top_k();
  out.has_seed = s.has_seed();
  out.seed = s.seed();
  return out;
}

void ToProto(const Sampling& s, v1::Sampling* out) {
  out->set_temperature(s.temperature);
  out->set_top_p(s.top_p);
  out->set_top_k(s.top_k);
  if (s.has_seed) out->set_seed(s.seed);
}

JobSpec FromProto(const v1::JobRequest& r, std::string* problem) {
  JobSpec spec;
  spec.custom_id = r.custom_id();
  spec.model = r.model();
  auto endpoint = ParseEndpointUrl(r.url());
  if (endpoint.ok()) {
    spec.endpoint = *endpoint;
  } else {
    *problem = endpoint.status().message();
  }
  switch (r.prompt_case()) {
    case v1::JobRequest::kText:
      spec.prompt_kind = PromptKind::kText;
      spec.prompt_text = r.text();
      break;
    case v1::JobRequest::kChat:
      spec.prompt_kind = PromptKind::kChat;
      for (const auto& m : r.chat().messages()) spec.messages.push_back({m.role(), m.content()});
      break;
    case v1::JobRequest::kTokenIds:
      spec.prompt_kind = PromptKind::kTokenIds;
      spec.prompt_token_ids.assign(r.token_ids().ids().begin(), r.token_ids().ids().end());
      break;
    case v1::JobRequest::PROMPT_NOT_SET:
      // Validation reports the missing prompt in the url's own terms.
      spec.prompt_kind =
          spec.endpoint == Endpoint::kChatCompletions ? PromptKind::kChat : PromptKind::kText;
      break;
  }
  spec.max_new_tokens = r.max_new_tokens();
  spec.sampling = FromProto(r.sampling());
  spec.stop.assign(r.stop().begin(), r.stop().end());
  spec.labels.assign(r.labels().begin(), r.labels().end());
  spec.logprobs = r.logprobs();
  spec.top_logprobs = r.top_logprobs();
  spec.priority = r.priority();
  return spec;
}

void ToProto(const JobSpec& spec, v1::JobRequest* out) {
  out->set_custom_id(spec.custom_id);
  out->set_model(spec.model);
  out->set_url(EndpointUrl(spec.endpoint));
  switch (spec.prompt_kind) {
    case PromptKind::kText:
      out->set_text(spec.prompt_text);
      break;
    case PromptKind::kChat: {
      auto* chat = out->mutable_chat();
      for (const ChatMessage& m : spec.messages) {
        auto* message = chat->add_messages();
        message->set_role(m.role);
        message->set_content(m.content);
      }
      break;
    }
    case PromptKind::kTokenIds:
      out->mutable_token_ids()->mutable_ids()->Assign(spec.prompt_token_ids.begin(),
                                                      spec.prompt_token_ids.end());
      break;
  }
  out->set_max_new_tokens(spec.max_new_tokens);
  ToProto(spec.sampling, out->mutable_sampling());
  for (const std::string& s : spec.stop) out->add_stop(s);
  for (const std::string& l : spec.labels) out->add_labels(l);
  out->set_logprobs(spec.logprobs);
  out->set_top_logprobs(spec.top_logprobs);
  out->set_priority(spec.priority);
}

JobOutput FromProto(const v1::JobOutput& o) {
  JobOutput out;
  out.text = o.text();
  out.token_ids.assign(o.token_ids().begin(), o.token_ids().end());
  out.finish_reason = o.finish_reason();
  out.prompt_tokens = o.prompt_tokens();
  out.completion_tokens = o.completion_tokens();
  out.cached_prompt_tokens = o.cached_prompt_tokens();
  for (const auto& lp : o.logprobs()) {
    TokenLogprob t{lp.token(), lp.text(), lp.logprob(), {}};
    for (const auto& top : lp.top()) t.top.push_back({top.token(), top.text(), top.logprob()});
    out.logprobs.push_back(std::move(t));
  }
  for (const auto& l : o.labels()) out.labels.push_back({l.label(), l.logprob()});
  return out;
}

void ToProto(const JobOutput& o, v1::JobOutput* out) {
  out->set_text(o.text);
  out->mutable_token_ids()->Assign(o.token_ids.begin(), o.token_ids.end());
  out->set_finish_reason(o.finish_reason);
  out->set_prompt_tokens(o.prompt_tokens);
  out->set_completion_tokens(o.completion_tokens);
  out->set_cached_prompt_tokens(o.cached_prompt_tokens);
  for (const auto& lp : o.logprobs) {
    auto* t = out->add_logprobs();
    t->set_token(lp.token);
    t->set_text(lp.text);
    t->set_logprob(lp.logprob);
    for (const auto& top : lp.top) {
      auto* x = t->add_top();
      x->set_token(top.token);
      x->set_text(top.text);
      x->set_logprob(top.logprob);
    }
  }
  for (const auto& l : o.labels) {
    auto* x = out->add_labels();
    x->set_label(l.label);
    x->set_logprob(l.logprob);
  }
}

ModelOffer FromProto(const v1::ModelAdvert& m) {
  return {m.name(),
          m.kv_bytes_per_token(),
          m.checkpoint_bytes(),
          m.seconds_per_pass(),
          m.max_context_tokens(),
          m.tokenizer_hash(),
          m.pass_token_budget(),
          m.unhealthy()};
}

void ToProto(const ModelOffer& m, v1::ModelAdvert* out) {
  out->set_name(m.name);
  out->set_kv_bytes_per_token(m.kv_bytes_per_token);
  out->set_checkpoint_bytes(m.checkpoint_bytes);
  out->set_seconds_per_pass(m.seconds_per_pass);
  out->set_max_context_tokens(m.max_context_tokens);
  out->set_tokenizer_hash(m.tokenizer_hash);
  out->set_pass_token_budget(m.pass_token_budget);
  out->set_unhealthy(m.unhealthy);
}

TokenizerFiles FromProto(const v1::TokenizerUpload& upload) {
  TokenizerFiles out;
  for (const auto& [name, content] : upload.files()) out.files[name] = content;
  out.eos_ids.assign(upload.eos_ids().begin(), upload.eos_ids().end());
  return out;
}

void ToProto(const TokenizerFiles& files, v1::TokenizerUpload* out) {
  for (const auto& [name, content] : files.files) (*out->mutable_files())[name] = content;
  for (int32_t id : files.eos_ids) out->add_eos_ids(id);
}

PassProgress FromProto(const v1::PassReport& r) {
  PassProgress out;
  out.batch_id = r.batch_id();
  out.pass_index = r.pass_index();
  out.seconds = r.seconds();
  out.bytes_read = r.bytes_read();
  out.io_wait_seconds = r.io_wait_seconds();
  out.sequences = r.sequences();
  out.tokens = r.tokens();
  out.mode = r.mode();
  for (const auto& [job, generated] : r.generated()) out.generated[job] = generated;
  out.free_kv_bytes = r.free_kv_bytes();
  out.want_top_up = r.want_top_up();
  out.free_pass_tokens = r.free_pass_tokens();
  out.experts_total = r.experts_total();
  out.experts_read = r.experts_read();
  for (const v1::TokenIds& kept : r.kept_prefixes()) {
    out.kept_prefixes.emplace_back(kept.ids().begin(), kept.ids().end());
  }
  return out;
}

void ToProto(const PassProgress& p, v1::PassReport* out) {
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
  out->set_free_pass_tokens(p.free_pass_tokens);
  out->set_experts_total(p.experts_total);
  out->set_experts_read(p.experts_read);
  for (const std::vector<int32_t>& kept : p.kept_prefixes) {
    out->add_kept_prefixes()->mutable_ids()->Add(kept.begin(), kept.end());
  }
}

WorkerHello FromProto(const v1::WorkerHello& h) {
  WorkerHello out;
  WorkerInfo& info = out.info;
  info.id = h.worker_id();
  info.device = h.device();
  info.memory_budget_bytes = h.memory_budget_bytes();
  info.kv_budget_bytes = h.kv_budget_bytes();
  info.read_bytes_per_second = h.read_bytes_per_second();
  info.max_batch_jobs = h.max_batch_jobs();
  info.open_model = h.open_model();
  info.cgroup_memory_limit_bytes = h.cgroup_memory_limit_bytes();
  for (const auto& m : h.models()) info.models.push_back(FromProto(m));
  out.running_batches.assign(h.running_batches().begin(), h.running_batches().end());
  out.version = h.version();
  return out;
}

void ToProto(const WorkerHello& hello, v1::WorkerHello* out) {
  const WorkerInfo& info = hello.info;
  out->set_worker_id(info.id);
  out->set_device(info.device);
  out->set_memory_budget_bytes(info.memory_budget_bytes);
  out->set_kv_budget_bytes(info.kv_budget_bytes);
  out->set_read_bytes_per_second(info.read_bytes_per_second);
  out->set_max_batch_jobs(info.max_batch_jobs);
  out->set_open_model(info.open_model);
  out->set_cgroup_memory_limit_bytes(info.cgroup_memory_limit_bytes);
  for (const ModelOffer& m : info.models) ToProto(m, out->add_models());
  for (int64_t batch : hello.running_batches) out->add_running_batches(batch);
  out->set_version(hello.version);
}

}  // namespace nightshift::api::wire
