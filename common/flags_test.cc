#include "common/flags.h"

#include <gtest/gtest.h>

namespace nightshift {
namespace {

struct Parsed {
  std::string dir;
  int64_t n = 7;
  double x = 0;
  bool json = false;
  bool prefetch = true;
  std::vector<std::string> ids;
};

FlagSet Make(Parsed* p) {
  FlagSet f("tool --dir DIR", "A test tool.");
  f.String("dir", &p->dir, "checkpoint directory", "DIR");
  f.Int("n", &p->n, "how many");
  f.Double("x", &p->x, "a number");
  f.Bool("json", &p->json, "print JSON");
  f.Bool("prefetch", &p->prefetch, "read ahead");
  f.StringList("ids", &p->ids, "token ids");
  return f;
}

TEST(FlagsTest, ParsesEveryForm) {
  Parsed p;
  FlagSet f = Make(&p);
  ASSERT_TRUE(f.Parse({"--dir", "/m", "--n=3", "--x", "2.5", "--json", "--no-prefetch", "--ids",
                       "1,2", "pos", "--ids=3", "--", "--json"})
                  .ok());
  EXPECT_EQ(p.dir, "/m");
  EXPECT_EQ(p.n, 3);
  EXPECT_DOUBLE_EQ(p.x, 2.5);
  EXPECT_TRUE(p.json);
  EXPECT_FALSE(p.prefetch);
  EXPECT_EQ(p.ids, (std::vector<std::string>{"1,2", "3"}));
  EXPECT_EQ(f.positional(), (std::vector<std::string>{"pos", "--json"}));
  EXPECT_TRUE(f.Seen("dir"));
  EXPECT_TRUE(f.Seen("prefetch"));
  EXPECT_FALSE(f.help_requested());
}

TEST(FlagsTest, AbsentFlagsKeepDefaults) {
  Parsed p;
  FlagSet f = Make(&p);
  ASSERT_TRUE(f.Parse(std::vector<std::string>{}).ok());
  EXPECT_EQ(p.n, 7);
  EXPECT_TRUE(p.prefetch);
  EXPECT_FALSE(f.Seen("n"));
}

TEST(FlagsTest, BadInputNamesTheFlag) {
  Parsed p;
  FlagSet f = Make(&p);
  Status st = f.Parse({"--n", "3x"});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--n"), std::string::npos);
  EXPECT_NE(Make(&p).Parse({"--bogus"}).message().find("unknown flag --bogus"), std::string::npos);
  EXPECT_NE(Make(&p).Parse({"--dir"}).message().find("--dir needs a value"), std::string::npos);
  EXPECT_FALSE(Make(&p).Parse({"--x", "nan"}).ok());
  EXPECT_FALSE(Make(&p).Parse({"--json=maybe"}).ok());
}

TEST(FlagsTest, HelpListsEveryFlag) {
  Parsed p;
  FlagSet f = Make(&p);
  ASSERT_TRUE(f.Parse({"--help"}).ok());
  EXPECT_TRUE(f.help_requested());
  std::string help = f.Help();
  for (const char* name : {"--dir DIR", "--n N", "--x X", "--json", "--prefetch", "--ids"}) {
    EXPECT_NE(help.find(name), std::string::npos) << name;
  }
}

TEST(FlagsTest, IntLists) {
  auto ok = ParseIntList("1,22,-3", "--ids");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<int64_t>{1, 22, -3}));
  EXPECT_FALSE(ParseIntList("", "--ids").ok());
  EXPECT_FALSE(ParseIntList("1,,2", "--ids").ok());
  EXPECT_FALSE(ParseIntList("1,2,", "--ids").ok());
  EXPECT_FALSE(ParseIntList("1,a", "--ids").ok());
}

}  // namespace
}  // namespace nightshift
