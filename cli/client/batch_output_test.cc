#include "cli/client/batch_output.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nightshift::cli {
namespace {

v1::Job Succeeded(const std::string& url) {
  v1::Job job;
  job.set_id(7);
  job.set_custom_id("a");
  job.set_model("tiny");
  job.set_url(url);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.set_updated_at_ms(1'700'000'000'123);
  v1::JobOutput* out = job.mutable_output();
  out->set_text("hello");
  out->set_finish_reason("length");
  out->set_prompt_tokens(5);
  out->set_completion_tokens(2);
  return job;
}

void AddLogprob(v1::JobOutput* out, const std::string& text, double lp, const std::string& alt) {
  v1::TokenLogprob* t = out->add_logprobs();
  t->set_text(text);
  t->set_logprob(lp);
  v1::TopLogprob* top = t->add_top();
  top->set_text(alt);
  top->set_logprob(lp - 1);
}

TEST(BatchOutputTest, CompletionLineHasOpenAIsShape) {
  v1::Job job = Succeeded("/v1/completions");
  AddLogprob(job.mutable_output(), "he", -0.5, "ha");
  AddLogprob(job.mutable_output(), "llo", -0.25, "lp");
  const auto line = BatchOutputLine(job);
  EXPECT_EQ(line["id"], "batch_req_7");
  EXPECT_EQ(line["custom_id"], "a");
  EXPECT_TRUE(line["error"].is_null());
  EXPECT_EQ(line["response"]["status_code"], 200);
  EXPECT_EQ(line["response"]["request_id"], "req_7");
  const auto& body = line["response"]["body"];
  EXPECT_EQ(body["id"], "cmpl-7");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 1'700'000'000);
  EXPECT_EQ(body["model"], "tiny");
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["text"], "hello");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  const auto& lp = body["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], nlohmann::ordered_json({"he", "llo"}));
  EXPECT_EQ(lp["token_logprobs"], nlohmann::ordered_json({-0.5, -0.25}));
  EXPECT_EQ(lp["top_logprobs"][0]["ha"], -1.5);
  EXPECT_EQ(lp["text_offset"], nlohmann::ordered_json({0, 2}));
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_EQ(body["usage"]["total_tokens"], 7);
  EXPECT_FALSE(body.contains("labels"));
  EXPECT_EQ(line.dump().substr(0, 40), R"({"id":"batch_req_7","custom_id":"a","res)");
}

TEST(BatchOutputTest, ChatLineHasAMessageAndContentLogprobs) {
  v1::Job job = Succeeded("/v1/chat/completions");
  AddLogprob(job.mutable_output(), "hi", -0.5, "yo");
  const auto body = BatchOutputLine(job)["response"]["body"];
  EXPECT_EQ(body["id"], "chatcmpl-7");
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "hello");
  EXPECT_FALSE(body["choices"][0].contains("text"));
  const auto& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], "hi");
  EXPECT_EQ(content[0]["logprob"], -0.5);
  EXPECT_EQ(content[0]["bytes"], nlohmann::ordered_json({104, 105}));
  EXPECT_EQ(content[0]["top_logprobs"][0]["token"], "yo");
}

TEST(BatchOutputTest, NoLogprobsAskedGivesNull) {
  const auto body = BatchOutputLine(Succeeded("/v1/completions"))["response"]["body"];
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
}

TEST(BatchOutputTest, ClassificationPutsTheBestLabelFirstClassAndNormalisesProbs) {
  v1::Job job = Succeeded("/v1/chat/completions");
  v1::JobOutput* out = job.mutable_output();
  out->set_finish_reason("label");
  for (auto [label, lp] : {std::pair<const char*, double>{" yes", -2.0}, {" no", -1.0}}) {
    v1::LabelScore* s = out->add_labels();
    s->set_label(label);
    s->set_logprob(lp);
  }
  const auto body = BatchOutputLine(job)["response"]["body"];
  EXPECT_EQ(body["choices"][0]["message"]["content"], " no");
  ASSERT_EQ(body["labels"].size(), 2u);
  EXPECT_EQ(body["labels"][0]["label"], " yes");  // the request's order
  EXPECT_EQ(body["labels"][0]["logprob"], -2.0);
  const double yes = body["labels"][0]["prob"], no = body["labels"][1]["prob"];
  EXPECT_NEAR(yes + no, 1.0, 1e-12);
  EXPECT_NEAR(no / yes, std::exp(1.0), 1e-9);
}

TEST(BatchOutputTest, FailedAndCancelledJobsCarryTheirError) {
  v1::Job failed;
  failed.set_id(3);
  failed.set_custom_id("f");
  failed.set_state(v1::JOB_STATE_FAILED);
  failed.set_error("prompt too long");
  const auto line = BatchOutputLine(failed);
  EXPECT_EQ(line["response"]["status_code"], 500);
  EXPECT_TRUE(line["response"]["body"].is_null());
  EXPECT_EQ(line["error"]["code"], "job_failed");
  EXPECT_EQ(line["error"]["message"], "prompt too long");

  v1::Job cancelled = failed;
  cancelled.set_state(v1::JOB_STATE_CANCELLED);
  cancelled.clear_error();
  cancelled.set_reason("cancelled by the user");
  const auto c = BatchOutputLine(cancelled);
  EXPECT_EQ(c["response"]["status_code"], 409);
  EXPECT_EQ(c["error"]["code"], "job_cancelled");
  EXPECT_EQ(c["error"]["message"], "cancelled by the user");
}

TEST(BatchOutputTest, IsFinished) {
  v1::Job job;
  for (auto state : {v1::JOB_STATE_QUEUED, v1::JOB_STATE_LEASED, v1::JOB_STATE_RUNNING}) {
    job.set_state(state);
    EXPECT_FALSE(IsFinished(job));
  }
  for (auto state : {v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}) {
    job.set_state(state);
    EXPECT_TRUE(IsFinished(job));
  }
}

}  // namespace
}  // namespace nightshift::cli
