#include "proto/batch_format.h"

#include <gtest/gtest.h>

#include <sstream>

namespace nightshift::api {
namespace {

std::vector<JobSpec> Specs(const std::string& text, BatchInputSummary* summary) {
  std::istringstream in(text);
  std::vector<JobSpec> specs;
  *summary = ParseBatchInput(in, {}, [&](JobSpec spec, int64_t) {
    specs.push_back(std::move(spec));
    return true;
  });
  return specs;
}

TEST(BatchFormatTest, LinesBecomeSpecsWithTheApisDefaults) {
  BatchInputSummary summary;
  const auto specs = Specs(
      R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "hi"}})"
      "\n\n"
      R"({"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "temperature": 0, "seed": 3}})"
      "\n"
      R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": [4, 5], "labels": [" y", " n"]}})",
      &summary);
  ASSERT_TRUE(summary.errors.empty()) << FormatLineErrors(summary.errors);
  EXPECT_EQ(summary.job_count, 3);
  EXPECT_EQ(summary.lines, 4);  // the blank line counts as a line, not as a job
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].endpoint, Endpoint::kCompletions);
  EXPECT_EQ(specs[0].prompt_kind, PromptKind::kText);
  EXPECT_EQ(specs[0].prompt_text, "hi");
  EXPECT_EQ(specs[0].max_new_tokens, 0);  // absent: the scheduler's default applies
  EXPECT_DOUBLE_EQ(specs[0].sampling.temperature, 1.0);
  EXPECT_FALSE(specs[0].sampling.has_seed);

  EXPECT_EQ(specs[1].endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(specs[1].prompt_kind, PromptKind::kChat);
  ASSERT_EQ(specs[1].messages.size(), 1u);
  EXPECT_EQ(specs[1].messages[0].role, "user");
  EXPECT_EQ(specs[1].max_new_tokens, 5);
  EXPECT_DOUBLE_EQ(specs[1].sampling.temperature, 0.0);
  EXPECT_TRUE(specs[1].sampling.has_seed);
  EXPECT_EQ(specs[1].sampling.seed, 3u);

  EXPECT_EQ(specs[2].prompt_kind, PromptKind::kTokenIds);
  EXPECT_EQ(specs[2].prompt_token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(specs[2].labels, (std::vector<std::string>{" y", " n"}));
}

TEST(BatchFormatTest, EveryBadLineIsNamedAndNoBadLineReachesTheSink) {
  BatchInputSummary summary;
  const auto specs = Specs(
      "not json\n"
      R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "hi"}})"
      "\n"
      R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "hi"}})"
      "\n"
      R"({"custom_id": "b", "method": "GET", "url": "/v1/embeddings", "body": {"model": "m"}})",
      &summary);
  EXPECT_EQ(specs.size(), 1u);
  EXPECT_EQ(FormatLineErrors(summary.errors),
            "line 1: not valid JSON\n"
            "line 3: duplicate custom_id 'a' (first on line 2)\n"
            "line 4: method is 'GET', not POST\n"
            "line 4: url '/v1/embeddings' is not supported (/v1/completions or "
            "/v1/chat/completions)\n");
}

TEST(BatchFormatTest, ASinkThatSaysStopEndsTheReading) {
  std::istringstream in(
      R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "hi"}})"
      "\n"
      R"({"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "hi"}})");
  int calls = 0;
  ParseBatchInput(in, {}, [&](JobSpec, int64_t) { return ++calls < 1; });
  EXPECT_EQ(calls, 1);
}

ResultLine Result(LineOutcome outcome) {
  ResultLine line;
  line.job_id = 9;
  line.custom_id = "x";
  line.model = "m";
  line.endpoint = Endpoint::kChatCompletions;
  line.finished_at_ms = 1'700'000'000'999;
  line.outcome = outcome;
  line.output.text = "hello";
  line.output.finish_reason = "stop";
  line.output.prompt_tokens = 3;
  line.output.completion_tokens = 1;
  line.output.cached_prompt_tokens = 2;
  line.error = "why";
  return line;
}

TEST(BatchFormatTest, OutputLinesFollowOpenAIForEachOutcome) {
  const auto ok = BatchOutputLine(Result(LineOutcome::kSucceeded));
  EXPECT_EQ(ok["id"], "batch_req_9");
  EXPECT_EQ(ok["custom_id"], "x");
  EXPECT_TRUE(ok["error"].is_null());
  EXPECT_EQ(ok["response"]["status_code"], 200);
  EXPECT_EQ(ok["response"]["body"]["object"], "chat.completion");
  EXPECT_EQ(ok["response"]["body"]["created"], 1'700'000'000);
  EXPECT_EQ(ok["response"]["body"]["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(ok["response"]["body"]["usage"]["total_tokens"], 4);
  // OpenAI's prompt caching: the cached part of prompt_tokens, inside usage.
  EXPECT_EQ(ok["response"]["body"]["usage"]["prompt_tokens_details"],
            nlohmann::ordered_json({{"cached_tokens", 2}}));
  EXPECT_EQ(ok["response"]["body"]["usage"].dump(),
            R"({"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,)"
            R"("prompt_tokens_details":{"cached_tokens":2}})");

  const auto failed = BatchOutputLine(Result(LineOutcome::kFailed));
  EXPECT_EQ(failed["response"]["status_code"], 500);
  EXPECT_TRUE(failed["response"]["body"].is_null());
  EXPECT_EQ(failed["error"]["code"], "job_failed");
  EXPECT_EQ(failed["error"]["message"], "why");

  const auto cancelled = BatchOutputLine(Result(LineOutcome::kCancelled));
  EXPECT_EQ(cancelled["response"]["status_code"], 409);
  EXPECT_EQ(cancelled["error"]["code"], "job_cancelled");

  const auto expired = BatchOutputLine(Result(LineOutcome::kExpired));
  EXPECT_TRUE(expired["response"].is_null());
  EXPECT_EQ(expired["error"]["code"], "batch_expired");
  EXPECT_EQ(expired["custom_id"], "x");
}

}  // namespace
}  // namespace nightshift::api
