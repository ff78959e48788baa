// Command lines of every binary, parsed by CLI11.
//
// A CommandLine is a CLI::App with the declarations the binaries share: each
// flag is declared with a pointer to where its value goes and a help line;
// Parse() fills them and collects positional arguments. Accepted forms:
// `--name value`, `--name=value`, `--bool-flag`, `--no-bool-flag`,
// `--bool-flag=false`, and `--` ending flags (everything after it is
// positional). `-h`/`--help` sets help_requested() instead of failing.
// Help() is CLI11's, in declaration order, under the synopsis and the
// description.
//
// A flag may fall back on a TOML config file (`--config FILE`, ConfigFile;
// for the daemons) and on an environment variable (Env): the command line
// wins over the config file, which wins over the environment (CLI11's order).
//
// Not thread-safe; build one per command invocation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace nightshift {

class CommandLine {
 public:
  // `usage` is the synopsis line ("nightshift inspect --model-dir DIR [--json]"),
  // `description` free text shown under it.
  CommandLine(std::string usage, std::string description);
  ~CommandLine();
  CommandLine(CommandLine&&) noexcept;
  CommandLine& operator=(CommandLine&&) noexcept;

  void String(const std::string& name, std::string* out, std::string help,
              std::string value_name = "VALUE");
  void Int(const std::string& name, int64_t* out, std::string help, std::string value_name = "N");
  void Double(const std::string& name, double* out, std::string help, std::string value_name = "X");
  void Bool(const std::string& name, bool* out, std::string help);
  // Repeatable: each occurrence appends one value.
  void StringList(const std::string& name, std::vector<std::string>* out, std::string help,
                  std::string value_name = "VALUE");
  // One of `choices`; anything else is refused naming them.
  void Choice(const std::string& name, std::string* out, const std::vector<std::string>& choices,
              std::string help);
  // A byte count: 123, 512M, 20G, 1.5T (common/size.h); stored in bytes.
  void Size(const std::string& name, uint64_t* out, std::string help);

  // Flag `name` takes its value from environment variable `var` when the
  // command line does not give it. The help names the variable.
  void Env(const std::string& name, const std::string& var);
  // Adds `--config FILE`: a TOML file of `flag-name = value` lines (a list
  // for a repeatable flag) read for the flags the command line leaves unset.
  // An unknown key is refused.
  void ConfigFile();

  // Parses argv[first..argc). Unknown flags, missing values and malformed
  // values are InvalidArgument naming the flag. On success the outputs hold
  // the parsed values (untouched where a flag was absent).
  Status Parse(int argc, char** argv, int first = 1);
  Status Parse(const std::vector<std::string>& args);

  // True when the flag was given (command line, environment or config file).
  bool Seen(const std::string& name) const;
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Help() const;
  // The long names of every flag, in declaration order (without "--").
  std::vector<std::string> FlagNames() const;

 private:
  CLI::Option* Find(const std::string& name) const;

  std::unique_ptr<CLI::App> app_;
  std::vector<std::string> names_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

// Parses "1,2,3" into integers; InvalidArgument names `what` on bad input.
StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& what);

}  // namespace nightshift
