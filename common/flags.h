// A small command-line flag parser shared by every binary.
//
// Each flag is declared with a pointer to where its value goes and a help
// line; Parse() fills them and collects positional arguments. Accepted forms:
// `--name value`, `--name=value`, `--bool-flag`, `--no-bool-flag`, and `--`
// ending flags (everything after it is positional). `-h`/`--help` sets
// help_requested() instead of failing. Help() renders the usage, the
// description and every flag with its help, in declaration order.
//
// Not thread-safe; build one per command invocation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift {

class FlagSet {
 public:
  // `usage` is the synopsis line ("nightshift inspect --model-dir DIR [--json]"),
  // `description` free text shown under it.
  FlagSet(std::string usage, std::string description);

  void String(const std::string& name, std::string* out, std::string help,
              std::string value_name = "VALUE");
  void Int(const std::string& name, int64_t* out, std::string help, std::string value_name = "N");
  void Double(const std::string& name, double* out, std::string help, std::string value_name = "X");
  void Bool(const std::string& name, bool* out, std::string help);
  // Repeatable: each occurrence appends.
  void StringList(const std::string& name, std::vector<std::string>* out, std::string help,
                  std::string value_name = "VALUE");

  // Parses argv[first..argc). Unknown flags, missing values and malformed
  // numbers are InvalidArgument naming the flag. On success the outputs hold
  // the parsed values (untouched where a flag was absent).
  Status Parse(int argc, char** argv, int first = 1);
  Status Parse(const std::vector<std::string>& args);

  // True when the flag appeared on the command line (any form).
  bool Seen(const std::string& name) const;
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string value_name;
    bool is_bool = false;
    std::function<Status(const std::string&)> set;
    bool seen = false;
  };
  Flag* Find(const std::string& name);
  void Add(Flag flag);

  std::string usage_;
  std::string description_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

// Parses "1,2,3" into integers; InvalidArgument names `what` on bad input.
StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& what);

}  // namespace nightshift
