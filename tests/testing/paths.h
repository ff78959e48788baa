// Where tests find the built binaries, the fixtures and the source tree: the
// directories ctest passes in NIGHTSHIFT_BIN_DIR, NIGHTSHIFT_TEST_DATA and
// NIGHTSHIFT_SOURCE_DIR, with defaults for a run by hand from the repository
// root. Plus the file helpers such tests keep needing (read, write, split into
// lines). Every test reads these variables through here.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace nightshift::testutil {

// $name, or `fallback` when it is not set.
inline std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

// $NIGHTSHIFT_BIN_DIR/name (default build/bin/name).
inline std::string BinPath(const std::string& name) {
  return EnvOr("NIGHTSHIFT_BIN_DIR", "build/bin") + "/" + name;
}

// $NIGHTSHIFT_SOURCE_DIR/path (default ./path): the repository's own files.
inline std::string SourcePath(const std::string& path) {
  return EnvOr("NIGHTSHIFT_SOURCE_DIR", ".") + "/" + path;
}

// $NIGHTSHIFT_TEST_DATA/path (default tests/data/path).
inline std::string DataPath(const std::string& path) {
  return EnvOr("NIGHTSHIFT_TEST_DATA", "tests/data") + "/" + path;
}

// The whole file; "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `text` to `path` (replacing it); false when it cannot be written.
inline bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

// `text` split at newlines (no trailing empty line).
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace nightshift::testutil
