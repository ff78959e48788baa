#include "scheduler/types.h"

#include <gtest/gtest.h>

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

TEST(EndpointTest, ParsesOnlyTheTwoUrls) {
  EXPECT_EQ(*ParseEndpointUrl("/v1/completions"), Endpoint::kCompletions);
  EXPECT_EQ(*ParseEndpointUrl("/v1/chat/completions"), Endpoint::kChatCompletions);
  auto bad = ParseEndpointUrl("/v1/embeddings");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/v1/embeddings"), std::string::npos);
}

TEST(KvTokensTest, GenerationCountsNewTokensClassificationCountsLabels) {
  JobSpec spec;
  spec.max_new_tokens = 20;
  TokenisedPrompt tokens{{1, 2, 3}, {}};
  EXPECT_EQ(KvTokens(spec, tokens), 23);
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
