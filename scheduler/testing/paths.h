// Where tests that drive the built binaries find them and the fixtures: the
// directories ctest passes in NIGHTSHIFT_BIN_DIR and NIGHTSHIFT_TEST_DATA,
// with the source tree's defaults for a run by hand from the repository
// root. Plus the two file helpers such tests keep needing.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace nightshift::scheduler::testing {

// $name, or `fallback` when it is not set.
inline std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

// $NIGHTSHIFT_BIN_DIR/name (default build/bin/name).
inline std::string BinPath(const std::string& name) {
  return EnvOr("NIGHTSHIFT_BIN_DIR", "build/bin") + "/" + name;
}

// $NIGHTSHIFT_TEST_DATA/path (default tests/data/path).
inline std::string DataPath(const std::string& path) {
  return EnvOr("NIGHTSHIFT_TEST_DATA", "tests/data") + "/" + path;
}

// The whole file; "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `text` split at newlines (no trailing empty line).
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace nightshift::scheduler::testing
