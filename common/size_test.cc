#include "common/size.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace nightshift {
namespace {

TEST(ParseSizeTest, AcceptsWhatPeopleWrite) {
  const struct {
    const char* text;
    uint64_t bytes;
  } cases[] = {
      {"2048", 2048u},
      {"1", 1u},
      {"100B", 100u},
      {"100b", 100u},
      {"64K", 64ull << 10},
      {"64KB", 64ull << 10},
      {"64KiB", 64ull << 10},
      {"64ki", 64ull << 10},
      {"512M", 512ull << 20},
      {"512m", 512ull << 20},
      {"512MiB", 512ull << 20},
      {"512MB", 512ull << 20},
      {"8G", 8ull << 30},
      {"8g", 8ull << 30},
      {"1.5GiB", 3ull << 29},
      {"0.5K", 512u},
      {"1T", 1ull << 40},
      {"2TiB", 2ull << 40},
      {"1.", 1u},
      {".5K", 512u},
  };
  for (const auto& c : cases) {
    StatusOr<uint64_t> got = ParseSize(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.bytes) << c.text;
  }
}

TEST(ParseSizeTest, RefusesNonsenseQuotingIt) {
  for (const char* bad : {"",    "G",   "KiB",   "iB",  "i",   "B",    ".",        "8X",  "8P",
                          "-1G", "+1G", "0",     "0.1", "0K",  "8 G",  " 8G",      "8G ", "8GG",
                          "8iG", "1e3", "1.2.3", "nan", "inf", "0x10", "99999999T"}) {
    StatusOr<uint64_t> got = ParseSize(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(got.status().ToString().find("'" + std::string(bad) + "'"), std::string::npos)
        << got.status().ToString();
  }
}

}  // namespace
}  // namespace nightshift
