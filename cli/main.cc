// Entry point shared by `nightshift` and `nightshift-engine`: dispatches to
// whichever commands were linked into the binary.
#include <cstring>
#include <iostream>
#include <string>

#include "cli/command.h"

#ifndef NS_BINARY_NAME
#define NS_BINARY_NAME "nightshift"
#endif

namespace {

void PrintUsage(std::ostream& out) {
  out << "usage: " NS_BINARY_NAME " COMMAND [FLAGS]\n\n"
      << "nightshift runs large language models that do not fit in memory as batch work,\n"
      << "streaming a checkpoint through memory one layer at a time.\n\ncommands:\n";
  for (const auto& c : nightshift::cli::Commands()) {
    std::string name = c.name;
    out << "  " << name << std::string(name.size() < 18 ? 18 - name.size() : 1, ' ') << c.summary
        << "\n";
  }
  out << "\n`" NS_BINARY_NAME " COMMAND --help` describes a command's flags.\n"
      << "exit codes: 0 success, 1 the work failed, 2 usage error.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? nightshift::cli::kExitUsage : nightshift::cli::kExitOk;
  }
  for (const auto& c : nightshift::cli::Commands()) {
    if (std::strcmp(c.name, argv[1]) == 0) return c.run(argc - 1, argv + 1);
  }
  std::cerr << NS_BINARY_NAME ": unknown command '" << argv[1] << "' (see --help)\n";
  return nightshift::cli::kExitUsage;
}
