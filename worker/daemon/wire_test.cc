#include "worker/daemon/wire.h"

#include <gtest/gtest.h>

namespace nightshift::worker {
namespace {

TEST(WireTest, AssignmentsTakeDefaultsForUnsetSampling) {
  v1::BatchAssignment a;
  a.set_batch_id(3);
  a.set_model("m");
  a.set_top_up(true);
  v1::JobAssignment* j = a.add_jobs();
  j->set_job_id(17);
  j->set_custom_id("c");
  j->add_prompt_token_ids(5);
  j->add_prompt_token_ids(6);
  j->add_label_token_ids()->add_ids(9);
  j->add_labels(" yes");
  j->set_max_new_tokens(4);
  j->add_stop("\n");
  j->set_logprobs(true);
  j->set_top_logprobs(2);
  j->mutable_sampling()->set_top_k(5);
  v1::JobAssignment* seeded = a.add_jobs();
  seeded->mutable_sampling()->set_temperature(0);
  seeded->mutable_sampling()->set_top_p(0.5);
  seeded->mutable_sampling()->set_seed(99);

  BatchAssignment b = wire::FromProto(a);
  EXPECT_EQ(b.batch_id, 3);
  EXPECT_EQ(b.model, "m");
  EXPECT_TRUE(b.top_up);
  ASSERT_EQ(b.jobs.size(), 2u);
  const JobAssignment& job = b.jobs[0];
  EXPECT_EQ(job.job_id, 17);
  EXPECT_EQ(job.prompt, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(job.label_ids, std::vector<std::vector<int32_t>>{{9}});
  EXPECT_EQ(job.labels, std::vector<std::string>{" yes"});
  EXPECT_EQ(job.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(job.logprobs);
  EXPECT_EQ(job.top_logprobs, 2);
  EXPECT_EQ(job.sampling.temperature, 1.0);
  EXPECT_EQ(job.sampling.top_p, 1.0);
  EXPECT_EQ(job.sampling.top_k, 5);
  EXPECT_EQ(job.sampling.seed, 17u);  // the job id when unset
  EXPECT_EQ(b.jobs[1].sampling.temperature, 0.0);
  EXPECT_EQ(b.jobs[1].sampling.top_p, 0.5);
  EXPECT_EQ(b.jobs[1].sampling.seed, 99u);
}

TEST(WireTest, OutcomesAndPassesCarryEveryField) {
  JobOutcome ok;
  ok.batch_id = 2;
  ok.job_id = 5;
  ok.ok = true;
  ok.output.text = "hi";
  ok.output.token_ids = {1, 2};
  ok.output.finish_reason = "stop";
  ok.output.prompt_tokens = 7;
  ok.output.completion_tokens = 2;
  ok.output.cached_prompt_tokens = 6;
  ok.output.logprobs = {{1, "h", -0.5, {{1, "h", -0.5}, {3, "x", -2}}}};
  ok.output.labels = {{" yes", -0.1}};
  v1::JobResultReport r;
  wire::ToProto(ok, &r);
  EXPECT_EQ(r.batch_id(), 2);
  EXPECT_EQ(r.job_id(), 5);
  ASSERT_TRUE(r.has_output());
  EXPECT_EQ(r.output().text(), "hi");
  EXPECT_EQ(r.output().token_ids_size(), 2);
  EXPECT_EQ(r.output().finish_reason(), "stop");
  EXPECT_EQ(r.output().prompt_tokens(), 7);
  EXPECT_EQ(r.output().completion_tokens(), 2);
  EXPECT_EQ(r.output().cached_prompt_tokens(), 6);
  ASSERT_EQ(r.output().logprobs_size(), 1);
  EXPECT_EQ(r.output().logprobs(0).top(1).text(), "x");
  EXPECT_EQ(r.output().labels(0).label(), " yes");

  JobOutcome failed;
  failed.job_id = 6;
  failed.error = "boom";
  wire::ToProto(failed, &r);
  EXPECT_EQ(r.error(), "boom");
  EXPECT_FALSE(r.has_output());

  api::PassProgress p;
  p.batch_id = 1;
  p.pass_index = 4;
  p.seconds = 1.5;
  p.bytes_read = 100;
  p.io_wait_seconds = 0.25;
  p.sequences = 3;
  p.tokens = 9;
  p.mode = "resident";
  p.generated = {{5, 2}};
  p.free_kv_bytes = 77;
  p.want_top_up = true;
  v1::PassReport pr;
  wire::ToProto(p, &pr);
  EXPECT_EQ(pr.pass_index(), 4);
  EXPECT_EQ(pr.mode(), "resident");
  EXPECT_EQ(pr.generated().at(5), 2);
  EXPECT_EQ(pr.free_kv_bytes(), 77);
  EXPECT_TRUE(pr.want_top_up());
  EXPECT_DOUBLE_EQ(pr.io_wait_seconds(), 0.25);
}

}  // namespace
}  // namespace nightshift::worker
