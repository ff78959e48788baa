#include "cli/command.h"

#include <algorithm>
#include <cstring>
#include <iostream>

namespace nightshift::cli {
namespace {

std::vector<Command>& Table() {
  static std::vector<Command> table;
  return table;
}

}  // namespace

const std::vector<Command>& Commands() { return Table(); }

bool RegisterCommand(Command command) {
  std::vector<Command>& table = Table();
  auto at = std::lower_bound(
      table.begin(), table.end(), command,
      [](const Command& a, const Command& b) { return std::strcmp(a.name, b.name) < 0; });
  table.insert(at, command);
  return true;
}

int ParseOrExit(CommandLine& flags, int argc, char** argv) {
  Status st = flags.Parse(argc, argv, 1);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  if (!st.ok()) {
    std::cerr << "nightshift " << argv[0] << ": " << st.message() << "\n";
    return kExitUsage;
  }
  return -1;
}

int Fail(const char* command, const Status& status) {
  std::cerr << "nightshift " << command << ": " << status.message() << "\n";
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

}  // namespace nightshift::cli
