#include "scheduler/wire.h"

#include <gtest/gtest.h>

namespace nightshift::scheduler::wire {
namespace {

TEST(WireTest, JobStatesRoundTrip) {
  for (JobState state : kAllJobStates) EXPECT_EQ(FromProto(ToProto(state)), state);
  EXPECT_FALSE(FromProto(v1::JOB_STATE_UNSPECIFIED).has_value());
}

TEST(WireTest, JobRequestDefaultsAndProblems) {
  v1::JobRequest r;
  r.set_custom_id("a");
  r.set_model("m");
  r.set_url("/v1/completions");
  r.mutable_token_ids()->add_ids(5);
  r.mutable_sampling()->set_seed(42);
  std::string problem;
  JobSpec spec = FromProto(r, &problem);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(spec.prompt_kind, PromptKind::kTokenIds);
  EXPECT_EQ(spec.prompt_token_ids, std::vector<int32_t>{5});
  EXPECT_EQ(spec.sampling.temperature, 1.0);  // absent: OpenAI's default
  EXPECT_EQ(spec.sampling.top_p, 1.0);
  EXPECT_TRUE(spec.sampling.has_seed);
  EXPECT_EQ(spec.sampling.seed, 42u);
  r.mutable_sampling()->set_temperature(0);
  EXPECT_EQ(FromProto(r, &problem).sampling.temperature, 0.0);

  v1::JobRequest chat;
  chat.set_url("/v1/chat/completions");
  EXPECT_EQ(FromProto(chat, &problem).prompt_kind, PromptKind::kChat);  // no prompt: chat kind
  v1::JobRequest bad;
  bad.set_url("/v1/embeddings");
  FromProto(bad, &problem);
  EXPECT_EQ(problem, "unsupported url '/v1/embeddings' (/v1/completions or /v1/chat/completions)");
}

TEST(WireTest, SubmitRequestCarriesSizeAndOneProblemPerJob) {
  v1::SubmitJobsRequest request;
  request.add_jobs()->set_url("/v1/completions");
  request.add_jobs()->set_url("nope");
  request.set_keep_open(true);
  request.set_idempotency_key("k");
  SubmitRequest out = FromProto(request);
  ASSERT_EQ(out.jobs.size(), 2u);
  ASSERT_EQ(out.decode_problems.size(), 2u);
  EXPECT_EQ(out.decode_problems[0], "");
  EXPECT_NE(out.decode_problems[1], "");
  EXPECT_EQ(out.request_bytes, static_cast<int64_t>(request.ByteSizeLong()));
  EXPECT_TRUE(out.keep_open);
  EXPECT_EQ(out.idempotency_key, "k");
}

TEST(WireTest, AssignmentsCarryTokensAndEverySamplingField) {
  Job job;
  job.id = 7;
  job.spec.custom_id = "c";
  job.spec.labels = {" yes", " no"};
  job.spec.sampling.temperature = 0.5;
  job.attempt = 1;
  job.tokens = {{1, 2, 3}, {{9}, {10, 11}}};
  WorkerCommand command;
  command.kind = WorkerCommand::Kind::kAssign;
  command.batch_id = 3;
  command.model = "m";
  command.top_up = true;
  command.jobs = {job};
  v1::SchedulerMessage message;
  ToProto(command, &message);
  ASSERT_TRUE(message.has_assign());
  const auto& a = message.assign();
  EXPECT_EQ(a.batch_id(), 3);
  EXPECT_TRUE(a.top_up());
  ASSERT_EQ(a.jobs_size(), 1);
  const auto& j = a.jobs(0);
  EXPECT_EQ(j.job_id(), 7);
  EXPECT_EQ(j.prompt_token_ids_size(), 3);
  ASSERT_EQ(j.label_token_ids_size(), 2);
  EXPECT_EQ(j.label_token_ids(1).ids_size(), 2);
  EXPECT_EQ(j.labels(0), " yes");
  EXPECT_TRUE(j.sampling().has_temperature());
  EXPECT_EQ(j.sampling().temperature(), 0.5);
  EXPECT_TRUE(j.sampling().has_top_p());
  EXPECT_FALSE(j.sampling().has_seed());
  EXPECT_EQ(j.attempt(), 1);
}

TEST(WireTest, JobsShowTheirOutputOrTheirError) {
  JobView done;
  done.job.state = JobState::kSucceeded;
  done.result = JobResult{};
  done.result->ok = true;
  done.result->output.text = "hi";
  done.result->output.labels = {{"yes", -0.1}};
  v1::Job out;
  ToProto(done, &out);
  EXPECT_TRUE(out.has_output());
  EXPECT_EQ(out.output().text(), "hi");
  EXPECT_EQ(FromProto(out.output()).labels[0].label, "yes");

  JobView failed;
  failed.job.state = JobState::kFailed;
  failed.job.reason = "needs 16 tokens of KV cache";
  v1::Job f;
  ToProto(failed, &f);
  EXPECT_FALSE(f.has_output());
  EXPECT_EQ(f.error(), "needs 16 tokens of KV cache");
}

TEST(WireTest, ASubmissionCarriesItsPromptTokensOnlyWhenCounted) {
  SubmissionStatus status;
  status.submission.id = 4;
  v1::Submission plain;
  ToProto(status, &plain);
  EXPECT_FALSE(plain.has_prompt_tokens());

  status.prompt_tokens = PromptTokenUsage{3, 272'900, 262'000};
  v1::Submission counted;
  ToProto(status, &counted);
  ASSERT_TRUE(counted.has_prompt_tokens());
  EXPECT_EQ(counted.prompt_tokens().jobs(), 3);
  EXPECT_EQ(counted.prompt_tokens().prompt_tokens(), 272'900);
  EXPECT_EQ(counted.prompt_tokens().cached_prompt_tokens(), 262'000);
}

}  // namespace
}  // namespace nightshift::scheduler::wire
