#include "worker/tokenizer/stop_strings.h"

#include <gtest/gtest.h>

namespace nightshift::tokenizer {
namespace {

// Feeds `pieces` in order; returns everything emitted and whether it stopped.
std::pair<std::string, bool> FeedAll(StopStringMatcher& matcher,
                                     const std::vector<std::string>& pieces) {
  std::string out;
  bool stopped = false;
  for (const std::string& piece : pieces) {
    StopStringMatcher::Result result = matcher.Feed(piece);
    out += result.text;
    stopped = stopped || result.stopped;
  }
  return {out, stopped};
}

TEST(StopStringMatcher, StopInsideOnePiece) {
  StopStringMatcher matcher({"STOP"});
  StopStringMatcher::Result result = matcher.Feed("hello STOP world");
  EXPECT_EQ(result.text, "hello ");
  EXPECT_TRUE(result.stopped);
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStringMatcher, StopSplitAcrossPiecesIsFoundAndHeldBack) {
  StopStringMatcher matcher({"STOP"});
  StopStringMatcher::Result first = matcher.Feed("hel");
  EXPECT_EQ(first.text, "hel");
  StopStringMatcher::Result second = matcher.Feed("lo ST");
  EXPECT_EQ(second.text, "lo ");  // "ST" could be the start of STOP
  EXPECT_FALSE(second.stopped);
  StopStringMatcher::Result third = matcher.Feed("OP and more");
  EXPECT_EQ(third.text, "");
  EXPECT_TRUE(third.stopped);
  StopStringMatcher::Result after = matcher.Feed("ignored");
  EXPECT_EQ(after.text, "");
  EXPECT_TRUE(after.stopped);
  EXPECT_EQ(matcher.Finish(), "");
}

TEST(StopStringMatcher, FalseStartIsReleased) {
  StopStringMatcher matcher({"STOP"});
  EXPECT_EQ(FeedAll(matcher, {"ST", "AR", "T"}), std::make_pair(std::string("START"), false));
}

TEST(StopStringMatcher, OverlappingPrefixes) {
  StopStringMatcher matcher({"aab"});
  EXPECT_EQ(FeedAll(matcher, {"a", "a", "a", "b", "c"}), std::make_pair(std::string("a"), true));
}

TEST(StopStringMatcher, EarliestOfSeveralStopsWins) {
  StopStringMatcher matcher({"c", "bc", "xyz"});
  EXPECT_EQ(FeedAll(matcher, {"ab", "cd"}), std::make_pair(std::string("a"), true));
}

TEST(StopStringMatcher, FinishReturnsTheHeldBackTail) {
  StopStringMatcher matcher({"END"});
  StopStringMatcher::Result result = matcher.Feed("the EN");
  EXPECT_EQ(result.text, "the ");
  EXPECT_EQ(matcher.Finish(), "EN");
}

TEST(StopStringMatcher, MultiByteStopStrings) {
  StopStringMatcher matcher({"\u3002"});  // ideographic full stop
  EXPECT_EQ(FeedAll(matcher, {"\u4F60\u597D", "\u3002\u518D"}),
            std::make_pair(std::string("\u4F60\u597D"), true));
}

TEST(StopStringMatcher, NoStopsOrEmptyStopsPassEverythingThrough) {
  StopStringMatcher matcher({"", ""});
  EXPECT_EQ(FeedAll(matcher, {"a", "", "b"}), std::make_pair(std::string("ab"), false));
  EXPECT_EQ(matcher.Finish(), "");
}

}  // namespace
}  // namespace nightshift::tokenizer
