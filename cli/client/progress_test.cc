#include "cli/client/progress.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nightshift::cli {
namespace {

// 2023-11-14 22:13:20 UTC.
constexpr int64_t kNowMs = 1'700'000'000'000;

v1::Submission Running() {
  v1::Submission s;
  s.set_id(3);
  v1::JobCounts* c = s.mutable_counts();
  c->set_total(40);
  c->set_succeeded(11);
  c->set_failed(1);
  c->set_running(2);
  c->set_queued(26);
  s.set_eta_seconds(320);
  v1::BatchProgress* b = s.add_batches();
  b->set_batch_id(4);
  b->set_worker_id("w1");
  b->set_passes_done(7);
  b->set_seconds_per_pass(2.1);
  return s;
}

TEST(ProgressTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(2 * 3600 + 7 * 60 + 10), "2h07m");
  EXPECT_EQ(FormatDuration(3 * 86400 + 4 * 3600), "3d04h");
  EXPECT_EQ(FormatDuration(-1), "?");
  EXPECT_EQ(FormatDuration(NAN), "?");
}

TEST(ProgressTest, FormatClockAddsTheDateOnlyOnAnotherDay) {
  EXPECT_EQ(FormatClock(kNowMs + 320'000, kNowMs, true), "22:18");
  EXPECT_EQ(FormatClock(kNowMs + 7'200'000, kNowMs, true), "2023-11-15 00:13");
}

TEST(ProgressTest, PlainLine) {
  EXPECT_EQ(RenderProgressLine(Running(), kNowMs, true),
            "submission 3: 12/40 done (11 succeeded, 1 failed, 0 cancelled), 2 running, 26 "
            "queued; ETA 5m20s (22:18); batch 4 on w1: pass 7, 2.10 s/pass");
  v1::Submission unknown = Running();
  unknown.clear_eta_seconds();
  unknown.clear_batches();
  EXPECT_EQ(RenderProgressLine(unknown, kNowMs, true),
            "submission 3: 12/40 done (11 succeeded, 1 failed, 0 cancelled), 2 running, 26 "
            "queued; ETA ?");
}

TEST(ProgressTest, TheMeasuredSecondsPerPassTheEtaRestsOnAreShownOnceThere) {
  v1::Submission s = Running();
  s.mutable_batches(0)->set_eta_seconds_per_pass(1.96);
  s.mutable_batches(0)->set_eta_passes_measured(7);
  EXPECT_EQ(RenderProgressLine(s, kNowMs, true),
            "submission 3: 12/40 done (11 succeeded, 1 failed, 0 cancelled), 2 running, 26 "
            "queued; ETA 5m20s (22:18); batch 4 on w1: pass 7, 1.96 s/pass measured");
  EXPECT_NE(RenderProgressBar(s, 200, kNowMs, true).find("w1: pass 7 1.96 s/pass measured"),
            std::string::npos);
}

TEST(ProgressTest, BarFillsByFinishedJobsAndFitsTheWidth) {
  const std::string bar = RenderProgressBar(Running(), 200, kNowMs, true);
  EXPECT_EQ(bar,
            "[######..............] 12/40 done  1 failed  ETA 5m20s (22:18)  w1: pass 7 2.10 "
            "s/pass");
  EXPECT_EQ(RenderProgressBar(Running(), 30, kNowMs, true).size(), 30u);
  v1::Submission done = Running();
  done.mutable_counts()->set_succeeded(39);
  EXPECT_EQ(RenderProgressBar(done, 200, kNowMs, true).substr(0, 22), "[####################]");
}

TEST(ProgressTest, FormatCountGroupsThousands) {
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(1000), "1,000");
  EXPECT_EQ(FormatCount(272'900), "272,900");
  EXPECT_EQ(FormatCount(1'234'567'890), "1,234,567,890");
  EXPECT_EQ(FormatCount(-12'345), "-12,345");
}

TEST(ProgressTest, PromptTokensShowTheSharedPartAndItsShare) {
  v1::PromptTokenUsage usage;
  EXPECT_EQ(RenderPromptTokens(usage), "prompt tokens: none yet (no job has succeeded)");
  usage.set_jobs(1000);
  usage.set_prompt_tokens(272'900);
  usage.set_cached_prompt_tokens(262'000);
  EXPECT_EQ(RenderPromptTokens(usage),
            "prompt tokens: 272,900, 262,000 of them computed once for several jobs (96%)");
  usage.set_cached_prompt_tokens(0);
  EXPECT_EQ(RenderPromptTokens(usage),
            "prompt tokens: 272,900, 0 of them computed once for several jobs (0%)");
  usage.set_cached_prompt_tokens(272'899);  // rounded down: 100% only when all are
  EXPECT_EQ(RenderPromptTokens(usage),
            "prompt tokens: 272,900, 272,899 of them computed once for several jobs (99%)");
}

TEST(ProgressTest, OutcomeAndExitCode) {
  v1::Submission s = Running();
  EXPECT_EQ(RenderOutcome(s), "submission 3 done: 11 succeeded, 1 failed, 0 cancelled");
  EXPECT_EQ(OutcomeExitCode(s), 1);
  s.mutable_counts()->set_succeeded(40);
  s.mutable_counts()->set_failed(0);
  EXPECT_EQ(OutcomeExitCode(s), 0);
}

}  // namespace
}  // namespace nightshift::cli
