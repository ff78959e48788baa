// The seed's doctests for the activation policy, with the same inputs and
// verdicts; sentences are checked for the facts they must carry.
#include "planner/policy.h"

#include <gtest/gtest.h>

namespace nightshift::planner {
namespace {

struct RequestCase {
  const char* value;
  StreamingRequest expected;
};

class ParseStreamingRequestTest : public ::testing::TestWithParam<RequestCase> {};

TEST_P(ParseStreamingRequestTest, ReadsAliases) {
  StatusOr<StreamingRequest> got = ParseStreamingRequest(GetParam().value);
  ASSERT_TRUE(got.ok()) << GetParam().value;
  EXPECT_EQ(*got, GetParam().expected) << GetParam().value;
}

INSTANTIATE_TEST_SUITE_P(Seed, ParseStreamingRequestTest,
                         ::testing::Values(RequestCase{"", StreamingRequest::kAuto},  // did not say
                                           RequestCase{"true", StreamingRequest::kAlways},
                                           RequestCase{"false", StreamingRequest::kNever},
                                           RequestCase{" Always ", StreamingRequest::kAlways},
                                           RequestCase{"auto", StreamingRequest::kAuto},
                                           RequestCase{"on", StreamingRequest::kAlways},
                                           RequestCase{"YES", StreamingRequest::kAlways},
                                           RequestCase{"1", StreamingRequest::kAlways},
                                           RequestCase{"never", StreamingRequest::kNever},
                                           RequestCase{"off", StreamingRequest::kNever},
                                           RequestCase{"no", StreamingRequest::kNever},
                                           RequestCase{"0", StreamingRequest::kNever}));

TEST(ParseStreamingRequestTest, UnknownWordIsAnError) {
  StatusOr<StreamingRequest> got = ParseStreamingRequest("maybe");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("'maybe'"), std::string::npos);
  EXPECT_FALSE(ParseStreamingRequest("alwyas").ok());
}

TEST(ResolveStreamingRequestTest, ExplicitThenEnvironmentThenAuto) {
  EXPECT_EQ(*ResolveStreamingRequest(std::nullopt, std::nullopt), StreamingRequest::kAuto);
  EXPECT_EQ(*ResolveStreamingRequest(std::nullopt, "never"), StreamingRequest::kNever);
  EXPECT_EQ(*ResolveStreamingRequest("always", "never"), StreamingRequest::kAlways);
  EXPECT_EQ(*ResolveStreamingRequest("", "off"), StreamingRequest::kNever);
  // An explicit value wins even over a malformed environment.
  EXPECT_EQ(*ResolveStreamingRequest("never", "bogus"), StreamingRequest::kNever);
}

TEST(ResolveStreamingRequestTest, MalformedEnvironmentNamesTheVariable) {
  StatusOr<StreamingRequest> got = ResolveStreamingRequest(std::nullopt, "bogus");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("NIGHTSHIFT_STREAMING"), std::string::npos);
  EXPECT_NE(got.status().message().find("'bogus'"), std::string::npos);
}

TEST(RuntimeForTest, MatchesSeed) {
  EXPECT_EQ(RuntimeFor(Accelerator::kCuda, false), Runtime::kCuda);
  EXPECT_EQ(RuntimeFor(Accelerator::kRocm, false), Runtime::kRocm);
  EXPECT_EQ(RuntimeFor(Accelerator::kMetal, false), Runtime::kMps);
  EXPECT_EQ(RuntimeFor(Accelerator::kCpu, false), std::nullopt);
  EXPECT_EQ(RuntimeFor(Accelerator::kCpu, true), Runtime::kCpu);
  EXPECT_STREQ(RuntimeName(Runtime::kMps), "mps");
}

TEST(CaveatsTest, MatchesSeed) {
  EXPECT_EQ(Caveats(Runtime::kCuda), Caveats(Runtime::kMps));  // not per platform
  EXPECT_EQ(Caveats(Runtime::kMps).size(), 2u);
  EXPECT_TRUE(Caveats(std::nullopt).empty());
  EXPECT_NE(Caveats(Runtime::kCpu)[0].find("safetensors"), std::string::npos);
  EXPECT_NE(Caveats(Runtime::kCpu)[1].find("mixture-of-experts"), std::string::npos);
}

DecideInput Input(StreamingRequest request, bool resolved, Accelerator accelerator,
                  std::optional<double> read_gbs) {
  DecideInput in;
  in.request = request;
  in.conventional_resolved = resolved;
  in.accelerator = accelerator;
  in.read_gbs = read_gbs;
  return in;
}

TEST(DecideTest, NeverDisablesEvenTheFallback) {
  Decision d = Decide(Input(StreamingRequest::kNever, false, Accelerator::kCuda, 2.5));
  EXPECT_FALSE(d.activate);
  EXPECT_EQ(d.trigger, Trigger::kDisabled);
  EXPECT_STREQ(TriggerName(d.trigger), "disabled");
}

TEST(DecideTest, AutoIsNotNeededWhenSomethingFits) {
  Decision d = Decide(Input(StreamingRequest::kAuto, true, Accelerator::kCuda, 2.5));
  EXPECT_FALSE(d.activate);
  EXPECT_EQ(d.trigger, Trigger::kNotNeeded);
  EXPECT_STREQ(TriggerName(d.trigger), "not-needed");
}

TEST(DecideTest, AutoFallsBackWhenNothingFits) {
  Decision d = Decide(Input(StreamingRequest::kAuto, false, Accelerator::kCuda, 2.5));
  EXPECT_TRUE(d.activate);
  EXPECT_EQ(d.trigger, Trigger::kFallback);
  EXPECT_EQ(d.runtime, Runtime::kCuda);
  EXPECT_TRUE(d.blockers.empty());
  EXPECT_EQ(d.caveats.size(), 2u);
}

TEST(DecideTest, AlwaysOnCpuWithoutPermissionIsBlocked) {
  Decision d = Decide(Input(StreamingRequest::kAlways, true, Accelerator::kCpu, 2.5));
  EXPECT_FALSE(d.activate);
  EXPECT_EQ(d.trigger, Trigger::kManual);
  ASSERT_FALSE(d.blockers.empty());
  EXPECT_NE(d.blockers[0].find("no accelerator"), std::string::npos);
  EXPECT_NE(d.reason.find("no accelerator"), std::string::npos);
  EXPECT_TRUE(d.caveats.empty());
}

TEST(DecideTest, AlwaysOnAllowedCpuRuns) {
  DecideInput in = Input(StreamingRequest::kAlways, true, Accelerator::kCpu, 0.8);
  in.allow_cpu = true;
  Decision d = Decide(in);
  EXPECT_TRUE(d.activate);
  EXPECT_EQ(d.trigger, Trigger::kManual);
  EXPECT_NE(d.reason.find("cpu"), std::string::npos);
}

TEST(DecideTest, UnknownBandwidthIsReportedButNotFatal) {
  Decision d = Decide(Input(StreamingRequest::kAlways, true, Accelerator::kCuda, std::nullopt));
  EXPECT_TRUE(d.activate);
  ASSERT_EQ(d.blockers.size(), 1u);
  EXPECT_NE(d.blockers[0].find("bandwidth"), std::string::npos);
}

TEST(DecideTest, MissingEngineIsFatal) {
  DecideInput in = Input(StreamingRequest::kAuto, false, Accelerator::kCuda, 2.5);
  in.engine_available = false;
  Decision d = Decide(in);
  EXPECT_FALSE(d.activate);
  EXPECT_EQ(d.trigger, Trigger::kFallback);
  EXPECT_NE(d.reason.find("without the streaming engine"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::planner
