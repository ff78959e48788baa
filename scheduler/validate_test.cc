#include "scheduler/validate.h"

#include <gtest/gtest.h>

#include "scheduler/test_util.h"

namespace nightshift::scheduler {
namespace {

using testing::TokenJob;

struct BadCase {
  const char* name;
  void (*mutate)(JobSpec&);
  const char* reason;
};

const BadCase kBadCases[] = {
    {"no custom id", [](JobSpec& j) { j.custom_id.clear(); }, "custom_id is empty"},
    {"no model", [](JobSpec& j) { j.model.clear(); }, "model is empty"},
    {"empty token prompt", [](JobSpec& j) { j.prompt_token_ids.clear(); }, "prompt is empty"},
    {"negative token", [](JobSpec& j) { j.prompt_token_ids[1] = -4; },
     "prompt token id -4 is negative"},
    {"empty text",
     [](JobSpec& j) {
       j.prompt_kind = PromptKind::kText;
       j.prompt_text.clear();
     },
     "prompt is empty"},
    {"chat url with a prompt", [](JobSpec& j) { j.endpoint = Endpoint::kChatCompletions; },
     "/v1/chat/completions takes messages, not a prompt"},
    {"completions url with messages",
     [](JobSpec& j) {
       j.prompt_kind = PromptKind::kChat;
       j.messages = {{"user", "hi"}};
     },
     "/v1/completions takes a prompt, not messages"},
    {"empty messages",
     [](JobSpec& j) {
       j.endpoint = Endpoint::kChatCompletions;
       j.prompt_kind = PromptKind::kChat;
     },
     "messages are empty"},
    {"message without role",
     [](JobSpec& j) {
       j.endpoint = Endpoint::kChatCompletions;
       j.prompt_kind = PromptKind::kChat;
       j.messages = {{"", "hi"}};
     },
     "message 0 has no role"},
    {"negative max tokens", [](JobSpec& j) { j.max_new_tokens = -1; },
     "max_new_tokens -1 is out of range [1, 1048576]"},
    {"too many max tokens", [](JobSpec& j) { j.max_new_tokens = 2'000'000; },
     "max_new_tokens 2000000 is out of range"},
    {"labels with generation", [](JobSpec& j) { j.labels = {"a"}; },
     "labels together with generation"},
    {"labels with stop",
     [](JobSpec& j) {
       j.labels = {"a"};
       j.max_new_tokens = 0;
       j.stop = {"x"};
     },
     "labels together with stop strings"},
    {"duplicate label",
     [](JobSpec& j) {
       j.labels = {"a", "a"};
       j.max_new_tokens = 0;
     },
     "label 'a' appears twice"},
    {"empty label",
     [](JobSpec& j) {
       j.labels = {""};
       j.max_new_tokens = 0;
     },
     "a label is empty"},
    {"temperature", [](JobSpec& j) { j.sampling.temperature = 2.5; }, "temperature"},
    {"top p", [](JobSpec& j) { j.sampling.top_p = 0; }, "top_p"},
    {"top k", [](JobSpec& j) { j.sampling.top_k = -1; }, "top_k -1 is negative"},
    {"top logprobs without logprobs", [](JobSpec& j) { j.top_logprobs = 2; },
     "top_logprobs needs logprobs"},
    {"too many top logprobs",
     [](JobSpec& j) {
       j.logprobs = true;
       j.top_logprobs = 21;
     },
     "top_logprobs 21 is out of range [0, 20]"},
    {"too many stops",
     [](JobSpec& j) {
       j.stop = {"a", "b", "c", "d", "e"};
     },
     "5 stop strings; at most 4"},
    {"empty stop", [](JobSpec& j) { j.stop = {""}; }, "a stop string is empty"},
};

class ValidateBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ValidateBadTest, NamesTheJobAndTheReason) {
  std::vector<JobSpec> jobs = {TokenJob("ok", "m"), TokenJob("bad", "m")};
  GetParam().mutate(jobs[1]);
  Status status = ValidateJobs(jobs, 100, SubmitLimits{});
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(std::string("job 1: ") + GetParam().reason), std::string::npos)
      << status.message();
  EXPECT_EQ(status.message().find("job 0"), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(Table, ValidateBadTest, ::testing::ValuesIn(kBadCases),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           std::string name;
                           for (const char* p = info.param.name; *p != 0; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

TEST(ValidateTest, GoodJobsPassAndGenerationGetsTheDefaultLength) {
  JobSpec generation = TokenJob("g", "m");
  generation.max_new_tokens = 0;
  JobSpec classify = TokenJob("c", "m");
  classify.max_new_tokens = 0;
  classify.labels = {"yes", "no"};
  JobSpec chat = TokenJob("chat", "m");
  chat.endpoint = Endpoint::kChatCompletions;
  chat.prompt_kind = PromptKind::kChat;
  chat.messages = {{"system", ""}, {"user", "hi"}};
  std::vector<JobSpec> jobs = {generation, classify, chat};
  ASSERT_TRUE(ValidateJobs(jobs, 100, SubmitLimits{}).ok());
  EXPECT_EQ(jobs[0].max_new_tokens, 16);
  EXPECT_EQ(jobs[1].max_new_tokens, 0);
}

TEST(ValidateTest, EveryBadJobIsListed) {
  std::vector<JobSpec> jobs = {TokenJob("a", "m"), TokenJob("a", "m"), TokenJob("", "")};
  Status status = ValidateJobs(jobs, 100, SubmitLimits{});
  EXPECT_EQ(status.message(),
            "job 1: duplicate custom_id 'a' (job 0); job 2: custom_id is empty; job 2: model is "
            "empty");
}

TEST(ValidateTest, AMessageNamesTheFirstProblemsAndCountsTheRest) {
  // 300 jobs naming a model no worker serves: the message stays small.
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 300; ++i) jobs.push_back(TokenJob("j" + std::to_string(i), "nobody-serves"));
  const std::set<std::string> known = {"llama"};
  Status status = ValidateJobs(jobs, 10, SubmitLimits{}, {}, &known);
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument);
  const std::string& m = status.message();
  EXPECT_EQ(m.rfind("job 0: model 'nobody-serves' is served by no worker", 0), 0u) << m;
  EXPECT_LE(m.size(), kMaxProblemsMessageBytes + 64) << m;
  size_t listed = 1;
  for (size_t at = m.find("; job "); at != std::string::npos; at = m.find("; job ", at + 1)) {
    ++listed;
  }
  EXPECT_LE(listed, kMaxProblemsInMessage);
  EXPECT_NE(
      m.find("; and " + std::to_string(300 - listed) + " more problems (300 bad jobs in all)"),
      std::string::npos)
      << m;
  // A job with two problems counts once among the bad jobs.
  std::vector<JobProblem> problems;
  for (size_t i = 0; i < 12; ++i) problems.push_back({i / 2, "reason " + std::to_string(i)});
  const std::string two_each = FormatJobProblems(problems);
  EXPECT_EQ(CountBadJobs(problems), 6u);
  EXPECT_NE(two_each.find("; and 2 more problems (6 bad jobs in all)"), std::string::npos)
      << two_each;
  // One reason longer than the limit is cut, not dropped.
  const std::string cut = FormatJobProblems({{4, std::string(5000, 'r')}});
  EXPECT_EQ(cut.rfind("job 4: rrr", 0), 0u);
  EXPECT_EQ(cut.size(), kMaxProblemsMessageBytes);
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
  // Few short problems are listed whole, with no count.
  EXPECT_EQ(FormatJobProblems({{1, "a"}, {3, "b"}}), "job 1: a; job 3: b");
}

TEST(ValidateTest, DecodeProblemsAreListedWithTheRest) {
  std::vector<JobSpec> jobs = {TokenJob("a", "m"), TokenJob("", "m")};
  Status status = ValidateJobs(jobs, 10, SubmitLimits{}, {"unsupported url '/v1/x'", ""});
  EXPECT_EQ(status.message(), "job 0: unsupported url '/v1/x'; job 1: custom_id is empty");
}

TEST(ValidateTest, AnUnknownModelIsNamedWithTheKnownOnes) {
  std::vector<JobSpec> jobs = {TokenJob("a", "llama"), TokenJob("b", "lama"), TokenJob("c", "")};
  const std::set<std::string> known = {"llama", "qwen"};
  Status status = ValidateJobs(jobs, 10, SubmitLimits{}, {}, &known);
  EXPECT_EQ(status.message(),
            "job 1: model 'lama' is served by no worker that has attached (known: llama, qwen); "
            "start its worker first, or run the scheduler with --allow-unknown-models; job 2: "
            "model is empty");
  EXPECT_TRUE(ValidateJobs(jobs, 10, SubmitLimits{}, {}, nullptr).message().find("lama") ==
              std::string::npos);
  const std::set<std::string> none;
  EXPECT_NE(UnknownModelProblem("x", none).find("(none has yet)"), std::string::npos);
  EXPECT_EQ(UnknownModelProblem("qwen", known), "");
}

TEST(ValidateTest, OversizedOrEmptyRequestsAreRefused) {
  SubmitLimits limits;
  limits.max_jobs_per_request = 2;
  limits.max_request_bytes = 1000;
  std::vector<JobSpec> three = {TokenJob("a", "m"), TokenJob("b", "m"), TokenJob("c", "m")};
  EXPECT_NE(ValidateJobs(three, 10, limits).message().find("3 jobs; at most 2"), std::string::npos);
  std::vector<JobSpec> one = {TokenJob("a", "m")};
  EXPECT_NE(ValidateJobs(one, 1001, limits).message().find("1001 bytes; at most 1000"),
            std::string::npos);
  std::vector<JobSpec> none;
  EXPECT_EQ(ValidateJobs(none, 0, limits).code(), StatusCode::kInvalidArgument);
}

TEST(ValidateTest, ContextCheckNeverTruncates) {
  JobSpec spec = TokenJob("a", "m", 6, 4);
  TokenisedPrompt tokens{spec.prompt_token_ids, {}};
  EXPECT_TRUE(CheckContext(spec, tokens, 10).ok());
  EXPECT_TRUE(CheckContext(spec, tokens, 0).ok());  // unknown context
  Status over = CheckContext(spec, tokens, 9);
  EXPECT_EQ(over.message(),
            "prompt of 6 tokens + 4 new tokens = 10 tokens exceeds the model's context of 9 "
            "tokens (prompts are never truncated)");
  spec.labels = {"x", "y"};
  tokens.labels = {{1, 2}, {3, 4, 5}};
  EXPECT_NE(CheckContext(spec, tokens, 9).message().find("6 tokens + 5 label tokens = 11"),
            std::string::npos);
}

}  // namespace
}  // namespace nightshift::scheduler
