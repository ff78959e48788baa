#include "common/command_line.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

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

CommandLine Make(Parsed* p) {
  CommandLine f("tool --dir DIR", "A test tool.");
  f.String("dir", &p->dir, "checkpoint directory", "DIR");
  f.Int("n", &p->n, "how many");
  f.Double("x", &p->x, "a number");
  f.Bool("json", &p->json, "print JSON");
  f.Bool("prefetch", &p->prefetch, "read ahead");
  f.StringList("ids", &p->ids, "token ids");
  return f;
}

TEST(CommandLineTest, ParsesEveryForm) {
  Parsed p;
  CommandLine f = Make(&p);
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

TEST(CommandLineTest, AbsentFlagsKeepDefaults) {
  Parsed p;
  CommandLine f = Make(&p);
  ASSERT_TRUE(f.Parse(std::vector<std::string>{}).ok());
  EXPECT_EQ(p.n, 7);
  EXPECT_TRUE(p.prefetch);
  EXPECT_FALSE(f.Seen("n"));
}

TEST(CommandLineTest, BadInputNamesTheFlag) {
  Parsed p;
  CommandLine f = Make(&p);
  Status st = f.Parse({"--n", "3x"});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--n"), std::string::npos);
  EXPECT_NE(Make(&p).Parse({"--bogus"}).message().find("unknown flag --bogus"), std::string::npos);
  EXPECT_NE(Make(&p).Parse({"--dir"}).message().find("--dir"), std::string::npos);
  EXPECT_NE(Make(&p).Parse({"-q"}).message().find("unknown flag -q"), std::string::npos);
  EXPECT_FALSE(Make(&p).Parse({"--x", "nan"}).ok());
  EXPECT_FALSE(Make(&p).Parse({"--json=maybe"}).ok());
}

TEST(CommandLineTest, HelpListsEveryFlag) {
  Parsed p;
  CommandLine f = Make(&p);
  ASSERT_TRUE(f.Parse({"--help"}).ok());
  EXPECT_TRUE(f.help_requested());
  std::string help = f.Help();
  for (const char* name : {"--dir DIR", "--n N", "--x X", "--json", "--prefetch", "--ids"}) {
    EXPECT_NE(help.find(name), std::string::npos) << name;
  }
}

TEST(CommandLineTest, ARepeatedFlagTakesOneValueEachTime) {
  Parsed p;
  CommandLine f = Make(&p);
  ASSERT_TRUE(f.Parse({"--ids", "1", "two", "--ids", "3"}).ok());
  EXPECT_EQ(p.ids, (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(f.positional(), std::vector<std::string>{"two"});
}

// As before CLI11: a single-valued flag given twice takes the last value
// (a wrapper script's default, overridden by a later argument).
TEST(CommandLineTest, ASingleValuedFlagGivenTwiceTakesTheLast) {
  Parsed p;
  CommandLine f = Make(&p);
  ASSERT_TRUE(
      f.Parse({"--n", "1", "--dir", "/a", "--n=2", "--dir", "/b", "--json", "--no-json"}).ok());
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.dir, "/b");
  EXPECT_FALSE(p.json);
}

TEST(CommandLineTest, NegativeNumbersAreValues) {
  Parsed p;
  ASSERT_TRUE(Make(&p).Parse({"--n", "-4", "--x", "-0.5"}).ok());
  EXPECT_EQ(p.n, -4);
  EXPECT_DOUBLE_EQ(p.x, -0.5);
}

TEST(CommandLineTest, ChoicesAndSizesAreValidated) {
  std::string mode = "auto";
  uint64_t bytes = 0;
  CommandLine f("tool", "");
  f.Choice("mode", &mode, {"auto", "always", "never"}, "when to stream");
  f.Size("budget", &bytes, "memory");
  ASSERT_TRUE(f.Parse({"--mode", "never", "--budget", "512M"}).ok());
  EXPECT_EQ(mode, "never");
  EXPECT_EQ(bytes, 512ull << 20);
  CommandLine g("tool", "");
  g.Choice("mode", &mode, {"auto", "always", "never"}, "when to stream");
  Status bad = g.Parse({"--mode", "sometimes"});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--mode"), std::string::npos) << bad.message();
  CommandLine h("tool", "");
  h.Size("budget", &bytes, "memory");
  EXPECT_FALSE(h.Parse({"--budget", "lots"}).ok());
  EXPECT_NE(g.Help().find("auto|always|never"), std::string::npos) << g.Help();
}

// The command line wins over the config file, the file over the environment.
TEST(CommandLineTest, ConfigFileAndEnvironmentFillWhatTheCommandLineLeaves) {
  const std::string path = ::testing::TempDir() + "/command_line_test.toml";
  {
    std::ofstream toml(path);
    toml << "# a worker's file\ndir = \"/from/file\"\nn = 5\nids = [\"a\", \"b\"]\n"
            "prefetch = false\n";
  }
  setenv("COMMAND_LINE_TEST_DIR", "/from/env", 1);
  setenv("COMMAND_LINE_TEST_X", "1.5", 1);
  Parsed p;
  CommandLine f = Make(&p);
  f.Env("dir", "COMMAND_LINE_TEST_DIR");
  f.Env("x", "COMMAND_LINE_TEST_X");
  f.ConfigFile();
  ASSERT_TRUE(f.Parse({"--config", path, "--n", "9"}).ok());
  EXPECT_EQ(p.dir, "/from/file");  // the file over the environment
  EXPECT_EQ(p.n, 9);               // the command line over the file
  EXPECT_DOUBLE_EQ(p.x, 1.5);      // the environment where nothing else says
  EXPECT_EQ(p.ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(p.prefetch);
  EXPECT_TRUE(f.Seen("dir"));
  EXPECT_NE(f.Help().find("COMMAND_LINE_TEST_DIR"), std::string::npos);
  // An unknown key is refused, naming it.
  {
    std::ofstream toml(path);
    toml << "dri = \"/typo\"\n";
  }
  Parsed q;
  CommandLine g = Make(&q);
  g.ConfigFile();
  Status bad = g.Parse({"--config", path});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("dri"), std::string::npos) << bad.message();
  // A missing file is refused.
  Parsed r;
  CommandLine h = Make(&r);
  h.ConfigFile();
  EXPECT_FALSE(h.Parse({"--config", path + ".missing"}).ok());
  unsetenv("COMMAND_LINE_TEST_DIR");
  unsetenv("COMMAND_LINE_TEST_X");
}

TEST(CommandLineTest, IntLists) {
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
