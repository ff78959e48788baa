#include "scheduler/types.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "scheduler/store.h"

namespace nightshift::scheduler {
namespace {

using S = JobState;
using E = JobEvent;

struct TransitionCase {
  JobState from;
  JobEvent event;
  bool allowed;
  JobState to;
};

TEST(TransitionTest, EveryStateAndEvent) {
  const TransitionCase cases[] = {
      {S::kQueued, E::kLease, true, S::kLeased},
      {S::kQueued, E::kStart, false, {}},
      {S::kQueued, E::kSucceed, false, {}},
      {S::kQueued, E::kFail, true, S::kFailed},
      {S::kQueued, E::kCancel, true, S::kCancelled},
      {S::kQueued, E::kRequeue, false, {}},
      {S::kLeased, E::kLease, false, {}},
      {S::kLeased, E::kStart, true, S::kRunning},
      {S::kLeased, E::kSucceed, true, S::kSucceeded},
      {S::kLeased, E::kFail, true, S::kFailed},
      {S::kLeased, E::kCancel, true, S::kCancelled},
      {S::kLeased, E::kRequeue, true, S::kQueued},
      {S::kRunning, E::kLease, false, {}},
      {S::kRunning, E::kStart, true, S::kRunning},
      {S::kRunning, E::kSucceed, true, S::kSucceeded},
      {S::kRunning, E::kFail, true, S::kFailed},
      {S::kRunning, E::kCancel, true, S::kCancelled},
      {S::kRunning, E::kRequeue, true, S::kQueued},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(JobStateName(c.from)) + " + " + JobEventName(c.event));
    auto to = Transition(c.from, c.event);
    ASSERT_EQ(to.ok(), c.allowed) << to.status().ToString();
    if (c.allowed) {
      EXPECT_EQ(*to, c.to);
    } else {
      EXPECT_EQ(to.status().code(), StatusCode::kFailedPrecondition);
    }
  }
}

TEST(TransitionTest, TerminalStatesTakeNoEvent) {
  for (JobState state : {S::kSucceeded, S::kFailed, S::kCancelled}) {
    EXPECT_TRUE(IsTerminal(state));
    for (JobEvent event : kAllJobEvents) {
      EXPECT_FALSE(Transition(state, event).ok()) << JobStateName(state) << JobEventName(event);
    }
  }
  EXPECT_FALSE(IsTerminal(S::kQueued));
  EXPECT_FALSE(IsTerminal(S::kLeased));
  EXPECT_FALSE(IsTerminal(S::kRunning));
}

TEST(JobStateTest, NamesRoundTrip) {
  for (JobState state : kAllJobStates) {
    auto parsed = ParseJobState(JobStateName(state));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, state);
  }
  EXPECT_EQ(ParseJobState("done").status().code(), StatusCode::kInvalidArgument);
}

// The state names a CHECK constraint of the initial migration allows, in
// order: the `n`th "CHECK (state IN (...))" of the file.
std::vector<std::string> CheckedStates(int n) {
  const std::string& sql = BuiltinMigrations().at(0).sql;
  const std::regex check(R"(CHECK \(state IN \(([^)]*)\)\))");
  auto it = std::sregex_iterator(sql.begin(), sql.end(), check);
  for (int i = 0; i < n && it != std::sregex_iterator(); ++i) ++it;
  std::vector<std::string> names;
  if (it == std::sregex_iterator()) return names;
  const std::string list = (*it)[1];
  const std::regex quoted("'([a-z]+)'");
  for (auto q = std::sregex_iterator(list.begin(), list.end(), quoted); q != std::sregex_iterator();
       ++q) {
    names.push_back((*q)[1]);
  }
  return names;
}

TEST(StateNamesTest, MatchTheMigrationsCheckConstraints) {
  std::vector<std::string> batches, jobs;
  for (BatchState state : kAllBatchStates) batches.push_back(BatchStateName(state));
  for (JobState state : kAllJobStates) jobs.push_back(JobStateName(state));
  EXPECT_EQ(CheckedStates(0), batches);  // the batches table comes first
  EXPECT_EQ(CheckedStates(1), jobs);
}

TEST(EndpointTest, ParsesOnlyTheTwoUrls) {
  EXPECT_EQ(*ParseEndpointUrl("/v1/completions"), Endpoint::kCompletions);
  EXPECT_EQ(*ParseEndpointUrl("/v1/chat/completions"), Endpoint::kChatCompletions);
  auto bad = ParseEndpointUrl("/v1/embeddings");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/v1/embeddings"), std::string::npos);
}

TEST(KvTokensTest, GenerationCountsFedBackTokensClassificationCountsLabels) {
  JobSpec spec;
  spec.max_new_tokens = 20;
  TokenisedPrompt tokens{{1, 2, 3}, {}};
  EXPECT_EQ(KvTokens(spec, tokens), 22);  // the last new token is never fed back
  EXPECT_EQ(PassesNeeded(spec), 20);
  spec.labels = {"yes", "no"};
  tokens.labels = {{7}, {8, 9}};
  EXPECT_EQ(KvTokens(spec, tokens), 6);
  EXPECT_EQ(PassesNeeded(spec), 1);
}

TEST(TokenizerHashTest, DependsOnEveryPart) {
  TokenizerFiles a{{{"tokenizer.json", "{}"}}, {2}};
  TokenizerFiles b = a;
  EXPECT_EQ(TokenizerHash(a), TokenizerHash(b));
  EXPECT_EQ(TokenizerHash(a).size(), 64u);
  b.eos_ids = {3};
  EXPECT_NE(TokenizerHash(a), TokenizerHash(b));
  b = a;
  b.files["tokenizer.json"] = "{ }";
  EXPECT_NE(TokenizerHash(a), TokenizerHash(b));
  b = a;
  b.files = {{"tokenizer.jso", "n{}"}};
  EXPECT_NE(TokenizerHash(a), TokenizerHash(b));
}

}  // namespace
}  // namespace nightshift::scheduler
