#include "planner/round.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace nightshift::planner {
namespace {

struct RoundCase {
  double x;
  int ndigits;
  double expected;
};

class PyRoundTest : public ::testing::TestWithParam<RoundCase> {};

TEST_P(PyRoundTest, MatchesPython) {
  const RoundCase& c = GetParam();
  EXPECT_EQ(PyRound(c.x, c.ndigits), c.expected) << "round(" << c.x << ", " << c.ndigits << ")";
}

// Expected values are what CPython 3 prints for round(x, n).
INSTANTIATE_TEST_SUITE_P(
    Python, PyRoundTest,
    ::testing::Values(RoundCase{2.675, 2, 2.67},  // 2.675 is 2.67499999... in binary
                      RoundCase{0.125, 2, 0.12},  // an exact tie goes to even
                      RoundCase{0.375, 2, 0.38},  // exact tie, even is up
                      RoundCase{0.5, 0, 0.0}, RoundCase{1.5, 0, 2.0}, RoundCase{2.5, 0, 2.0},
                      RoundCase{3.5, 0, 4.0}, RoundCase{-0.5, 0, -0.0}, RoundCase{-1.5, 0, -2.0},
                      RoundCase{-2.5, 0, -2.0}, RoundCase{-2.675, 2, -2.67},
                      RoundCase{-0.125, 2, -0.12}, RoundCase{1.005, 2, 1.0},  // 1.00499999...
                      RoundCase{41.17647058823529, 3, 41.176},
                      RoundCase{6.125, 1, 6.1},  // the seed's 70B footprint
                      RoundCase{6.175, 1, 6.2},  // 6.17500000000000001...
                      RoundCase{0.0242857, 3, 0.024}, RoundCase{55.6, 0, 56.0},
                      RoundCase{1e300, 3, 1e300}, RoundCase{123.456, 0, 123.0}));

TEST(PyRoundTest, NegativeZeroKeepsItsSign) {
  EXPECT_TRUE(std::signbit(PyRound(-0.4, 0)));
  EXPECT_TRUE(std::signbit(PyRound(-0.5, 0)));
  EXPECT_FALSE(std::signbit(PyRound(0.5, 0)));
}

TEST(PyRoundTest, NonFiniteValuesPassThrough) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(PyRound(inf, 3), inf);
  EXPECT_EQ(PyRound(-inf, 1), -inf);
  EXPECT_TRUE(std::isnan(PyRound(std::nan(""), 2)));
}

struct ReprCase {
  double x;
  const char* expected;
};

class PyReprTest : public ::testing::TestWithParam<ReprCase> {};

TEST_P(PyReprTest, MatchesPython) { EXPECT_EQ(PyRepr(GetParam().x), GetParam().expected); }

INSTANTIATE_TEST_SUITE_P(
    Python, PyReprTest,
    ::testing::Values(ReprCase{140.0, "140.0"}, ReprCase{0.005, "0.005"}, ReprCase{200.0, "200.0"},
                      ReprCase{41.176, "41.176"}, ReprCase{0.1 + 0.2, "0.30000000000000004"},
                      ReprCase{0.0001, "0.0001"}, ReprCase{0.00001, "1e-05"},
                      ReprCase{1.5e-7, "1.5e-07"}, ReprCase{1e15, "1000000000000000.0"},
                      ReprCase{1e16, "1e+16"}, ReprCase{1.5e16, "1.5e+16"}, ReprCase{-2.5, "-2.5"},
                      ReprCase{0.0, "0.0"}, ReprCase{-0.0, "-0.0"}, ReprCase{0.01, "0.01"},
                      ReprCase{5e-324, "5e-324"},
                      ReprCase{1.7976931348623157e308, "1.7976931348623157e+308"},
                      ReprCase{std::numeric_limits<double>::infinity(), "inf"},
                      ReprCase{-std::numeric_limits<double>::infinity(), "-inf"}));

TEST(FormatFixedTest, RoundsTheExactValueHalfToEven) {
  EXPECT_EQ(FormatFixed(0.25, 1), "0.2");
  EXPECT_EQ(FormatFixed(0.35, 1), "0.3");  // 0.34999999...
  EXPECT_EQ(FormatFixed(0.5, 0), "0");
  EXPECT_EQ(FormatFixed(1.5, 0), "2");
  EXPECT_EQ(FormatFixed(42.0, 0), "42");
  EXPECT_EQ(FormatFixed(3.0833333, 0), "3");
  EXPECT_EQ(FormatFixed(6.125, 1), "6.1");
}

}  // namespace
}  // namespace nightshift::planner
