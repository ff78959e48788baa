// The `nightshift` command table.
//
// Each subcommand lives in its own file under cli/commands/ and registers
// itself with NS_REGISTER_COMMAND at static-initialisation time, so adding a
// command touches no other command's file. A command's Run gets argv with
// argv[0] = the subcommand name and returns the process exit code:
//
//   0  success
//   1  the work failed (bad checkpoint, engine error, server said no)
//   2  usage error (unknown flag, missing or malformed argument)
//
// Commands print results on stdout, errors as one line on stderr
// ("nightshift inspect: model.safetensors: ..."), and honour --help.
#pragma once

#include <string>
#include <vector>

#include "common/command_line.h"
#include "common/status.h"

namespace nightshift::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

using CommandFn = int (*)(int argc, char** argv);

struct Command {
  const char* name;
  const char* summary;  // one line for the top-level help
  CommandFn run;
};

// All registered commands, sorted by name. Safe after static initialisation.
const std::vector<Command>& Commands();

// Called by NS_REGISTER_COMMAND; returns true so it can initialise a static.
bool RegisterCommand(Command command);

// Parses flags for `command` and handles the shared outcomes: prints help and
// returns kExitOk when --help was given, prints the error and returns
// kExitUsage on a parse error. Returns -1 when the command should go on.
int ParseOrExit(CommandLine& flags, int argc, char** argv);

// Prints "nightshift NAME: message" on stderr and returns kExitFailure
// (kExitUsage for InvalidArgument).
int Fail(const char* command, const Status& status);

}  // namespace nightshift::cli

#define NS_REGISTER_COMMAND(name, summary, fn)                    \
  static const bool ns_command_registered_##fn [[maybe_unused]] = \
      ::nightshift::cli::RegisterCommand({name, summary, fn})
