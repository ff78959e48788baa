#include "cli/client/batch_input.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include "tests/testing/paths.h"

namespace nightshift::cli {
namespace {

std::string DataFile(const std::string& name) { return testutil::DataPath("cli/" + name); }

BatchInput Parse(const std::string& text, BatchInputOptions options = {}) {
  std::istringstream in(text);
  return ParseBatchInput(in, options);
}

// The reasons given for a one-line file.
std::vector<std::string> Reasons(const std::string& line, BatchInputOptions options = {}) {
  std::vector<std::string> reasons;
  for (const LineError& e : Parse(line, options).errors) {
    EXPECT_EQ(e.line, 1);
    reasons.push_back(e.reason);
  }
  return reasons;
}

const std::string kHead = R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", )";

std::string Completion(const std::string& body_fields) {
  return kHead + R"("body": {"model": "m", "prompt": "hi")" +
         (body_fields.empty() ? "" : ", " + body_fields) + "}}";
}

TEST(BatchInputTest, ParsesTheValidFixtureFieldByField) {
  std::ifstream in(DataFile("valid.jsonl"));
  ASSERT_TRUE(in) << DataFile("valid.jsonl");
  BatchInput input = ParseBatchInput(in, {});
  ASSERT_TRUE(input.errors.empty()) << FormatLineErrors(input.errors);
  ASSERT_EQ(input.jobs.size(), 4u);
  EXPECT_EQ(input.lines, (std::vector<int64_t>{1, 2, 3, 4}));

  const v1::JobRequest& gen = input.jobs[0];
  EXPECT_EQ(gen.custom_id(), "gen-1");
  EXPECT_EQ(gen.model(), "tiny");
  EXPECT_EQ(gen.url(), "/v1/completions");
  EXPECT_EQ(gen.text(), "Once upon a time");
  EXPECT_EQ(gen.max_new_tokens(), 3);
  EXPECT_DOUBLE_EQ(gen.sampling().temperature(), 0.7);
  EXPECT_DOUBLE_EQ(gen.sampling().top_p(), 0.9);
  EXPECT_EQ(gen.sampling().seed(), 42u);
  ASSERT_EQ(gen.stop_size(), 1);
  EXPECT_EQ(gen.stop(0), "\n");
  EXPECT_TRUE(gen.logprobs());
  EXPECT_EQ(gen.top_logprobs(), 2);  // legacy completions: logprobs N

  const v1::JobRequest& chat = input.jobs[1];
  EXPECT_EQ(chat.url(), "/v1/chat/completions");
  ASSERT_EQ(chat.chat().messages_size(), 2);
  EXPECT_EQ(chat.chat().messages(0).role(), "system");
  EXPECT_EQ(chat.chat().messages(1).content(), "Say hi");
  EXPECT_EQ(chat.max_new_tokens(), 2);
  EXPECT_TRUE(chat.logprobs());
  EXPECT_EQ(chat.top_logprobs(), 1);

  const v1::JobRequest& cls = input.jobs[2];
  ASSERT_EQ(cls.labels_size(), 2);
  EXPECT_EQ(cls.labels(0), " yes");
  EXPECT_EQ(cls.labels(1), " no");
  EXPECT_EQ(cls.max_new_tokens(), 0);

  const v1::JobRequest& ids = input.jobs[3];
  ASSERT_EQ(ids.token_ids().ids_size(), 3);
  EXPECT_EQ(ids.token_ids().ids(2), 3);
  EXPECT_DOUBLE_EQ(ids.sampling().temperature(), 1.0);  // left out: the API's default
}

TEST(BatchInputTest, ModelOverrideAndPriorityApplyToEveryLine) {
  BatchInputOptions options;
  options.model_override = "other";
  options.priority = 7;
  BatchInput input = Parse(kHead + R"("body": {"prompt": "no model here"}})" + "\n" +
                               R"({"custom_id": "b", "method": "POST", "url": "/v1/completions", )"
                               R"("body": {"model": "m", "prompt": "hi"}})",
                           options);
  ASSERT_TRUE(input.errors.empty()) << FormatLineErrors(input.errors);
  ASSERT_EQ(input.jobs.size(), 2u);
  for (const v1::JobRequest& job : input.jobs) {
    EXPECT_EQ(job.model(), "other");
    EXPECT_EQ(job.priority(), 7);
  }
}

TEST(BatchInputTest, EveryBadLineIsListedByNumberWithItsReasons) {
  std::ifstream in(DataFile("invalid.jsonl"));
  ASSERT_TRUE(in);
  BatchInput input = ParseBatchInput(in, {});
  const std::string text = FormatLineErrors(input.errors);
  const std::vector<std::pair<int64_t, std::string>> expected = {
      {2, "not valid JSON"},
      {3, "not a JSON object but a list"},
      {4, "custom_id is missing"},
      {5, "duplicate custom_id 'ok-1' (first on line 1)"},
      {6, "method is 'GET', not POST"},
      {7, "url '/v1/embeddings' is not supported"},
      {8, "max_tokens must be an integer, not a string"},
      {9, "temperature 3 is out of range [0, 2]"},
      {10, "/v1/chat/completions needs body.messages"},
      {11, "labels together with max_tokens"},
  };
  for (const auto& [line, reason] : expected) {
    bool found = false;
    for (const LineError& e : input.errors) found |= e.line == line && e.reason.find(reason) == 0;
    EXPECT_TRUE(found) << "line " << line << ": " << reason << "\nin:\n" << text;
  }
  for (const LineError& e : input.errors) EXPECT_NE(e.line, 1) << text;  // line 1 is fine
  EXPECT_EQ(input.jobs.size(), 1u);
}

TEST(BatchInputTest, RangesAndTypes) {
  EXPECT_EQ(Reasons(Completion(R"("top_p": 0)")),
            std::vector<std::string>{"top_p 0 is out of range (0, 1]"});
  EXPECT_EQ(Reasons(Completion(R"("max_tokens": 0)")),
            std::vector<std::string>{"max_tokens 0 is out of range [1, 1048576]"});
  EXPECT_EQ(Reasons(Completion(R"("seed": -1)")), std::vector<std::string>{"seed -1 is negative"});
  EXPECT_EQ(Reasons(Completion(R"("stop": ["a","b","c","d","e"])")),
            std::vector<std::string>{"5 stop strings; at most 4"});
  EXPECT_EQ(Reasons(Completion(R"("top_logprobs": 3)")),
            std::vector<std::string>{"top_logprobs needs logprobs: true"});
  EXPECT_EQ(Reasons(Completion(R"("logprobs": 21)")),
            std::vector<std::string>{"logprobs 21 is out of range [0, 20]"});
  EXPECT_EQ(Reasons(Completion(R"("n": 2)")),
            std::vector<std::string>{"n 2 is out of range [1, 1]"});
  EXPECT_EQ(Reasons(Completion(R"("stream": true)")),
            std::vector<std::string>{"stream: true is not supported in a batch"});
  EXPECT_EQ(Reasons(Completion(R"("labels": ["x", "x"])")),
            std::vector<std::string>{"label 'x' appears twice"});
  EXPECT_EQ(Reasons(Completion(R"("labels": "x")")),
            std::vector<std::string>{"labels must be a list of strings, not a string"});
  EXPECT_EQ(Reasons(kHead + R"("body": {"model": "m", "prompt": ["a", "b"]}})"),
            std::vector<std::string>{"prompt holds 2 strings; give one prompt per line"});
  EXPECT_EQ(Reasons(kHead + R"("body": {"model": "m", "prompt": [1, -2]}})"),
            std::vector<std::string>{"prompt token id -2 is not a token id"});
  EXPECT_EQ(Reasons(kHead + R"("body": {"prompt": "x"}})"),
            std::vector<std::string>{"body.model is missing (or give --model)"});
  EXPECT_EQ(Reasons(kHead + R"("body": 5})"),
            std::vector<std::string>{"body must be an object, not an integer"});
  EXPECT_TRUE(Reasons(Completion(R"("temperature": 0, "top_k": -1, "stop": null)")).empty());
}

TEST(BatchInputTest, UnknownFieldsAreRefusedOnlyInStrictMode) {
  const std::string line = Completion(R"("presence_penalty": 0.5)");
  EXPECT_TRUE(Reasons(line).empty());
  BatchInputOptions strict;
  strict.strict = true;
  EXPECT_EQ(Reasons(line, strict), std::vector<std::string>{"unknown field body.presence_penalty"});
}

TEST(BatchInputTest, ChatContentPartsAreJoined) {
  BatchInput input = Parse(
      R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", )"
      R"("messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}})");
  ASSERT_TRUE(input.errors.empty()) << FormatLineErrors(input.errors);
  EXPECT_EQ(input.jobs[0].chat().messages(0).content(), "ab");
}

TEST(BatchInputTest, ASinkTakesTheJobsAndCanStopTheRead) {
  std::string text;
  for (const char* id : {"a", "b", "c"}) {
    text +=
        R"({"custom_id": ")" + std::string(id) +
        R"(", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "x"}})" +
        "\n";
  }
  std::vector<std::pair<std::string, int64_t>> seen;
  std::istringstream in(text + "{bad\n");
  BatchInput input = ParseBatchInput(in, {}, [&](v1::JobRequest job, int64_t line) {
    seen.emplace_back(job.custom_id(), line);
    return true;
  });
  EXPECT_TRUE(input.jobs.empty());
  EXPECT_EQ(input.job_count, 3);
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, int64_t>>{{"a", 1}, {"b", 2}, {"c", 3}}));
  ASSERT_EQ(input.errors.size(), 1u);
  EXPECT_EQ(input.errors[0].line, 4);

  std::istringstream again(text);
  int calls = 0;
  input = ParseBatchInput(again, {}, [&](v1::JobRequest, int64_t) { return ++calls < 2; });
  EXPECT_EQ(calls, 2);
}

TEST(BatchInputTest, ServerErrorsNameTheLines) {
  EXPECT_EQ(ServerErrorsByLine("job 0: prompt is empty; job 2: top_k -1 is negative", {3, 5, 9}),
            "\nline 3: prompt is empty\nline 9: top_k -1 is negative");
  EXPECT_EQ(ServerErrorsByLine("job 7: x", {1}), "job 7: x");  // not in this chunk: kept
  EXPECT_EQ(ServerErrorsByLine("the request has no jobs", {}), "the request has no jobs");
}

TEST(BadLineReportTest, LocalAndCheckedLinesAreMergedInLineOrderAndCountedAll) {
  BadLineReport report;
  EXPECT_TRUE(report.empty());
  report.AddLocal({{2, "not valid JSON"},
                   {7, "temperature 3 is out of range [0, 2]"},
                   {7, "top_k -1 is negative"}});
  // A chunk of the good lines 1, 3, 4, 5: the scheduler names jobs 1 and 2
  // and counts 3 bad jobs (one it did not list).
  v1::CheckJobsResponse checked;
  for (auto [index, reason] : std::vector<std::pair<int, std::string>>{
           {1, "model 'x' is served by no worker"}, {2, "prompt of 9 tokens exceeds"}}) {
    v1::JobProblem* p = checked.add_problems();
    p->set_index(index);
    p->set_reason(reason);
  }
  checked.set_problem_count(3);
  checked.set_bad_jobs(3);
  report.AddChecked(checked, {1, 3, 4, 5});
  EXPECT_EQ(report.bad_lines(), 5);
  EXPECT_EQ(report.Format(50),
            "line 2: not valid JSON\n"
            "line 3: model 'x' is served by no worker\n"
            "line 4: prompt of 9 tokens exceeds\n"
            "line 7: temperature 3 is out of range [0, 2]\n"
            "line 7: top_k -1 is negative\n"
            "... and 1 more bad line (5 in all)\n");
  EXPECT_EQ(report.Format(2),
            "line 2: not valid JSON\n"
            "line 3: model 'x' is served by no worker\n"
            "... and 3 more bad lines (5 in all)\n");
}

TEST(BatchInputTest, BlankLinesAreSkippedButCounted) {
  BatchInput input = Parse("\n" + Completion("") + "\n\n{bad\n");
  ASSERT_EQ(input.errors.size(), 1u);
  EXPECT_EQ(input.errors[0].line, 4);
  EXPECT_EQ(FormatLineErrors(input.errors), "line 4: not valid JSON\n");
}

}  // namespace
}  // namespace nightshift::cli
