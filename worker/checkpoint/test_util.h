// Helpers for the checkpoint reader's tests: fixture paths, temporary
// directories and hand-built safetensors files. Test-only; not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/temp_dir.h"

namespace nightshift::checkpoint::testing {

// $NIGHTSHIFT_TEST_DATA/models/<name> (testutil::DataPath).
std::string FixtureDir(const std::string& name);

// The fixture names under $NIGHTSHIFT_TEST_DATA/models, sorted.
std::vector<std::string> FixtureNames();

// Temporary directories: the shared test helper (tests/testing/temp_dir.h).
using testutil::TempDir;

// The whole file / the file replaced by `bytes` (tests/testing/paths.h).
std::string ReadFileBytes(const std::string& path);
void WriteFileBytes(const std::string& path, const std::string& bytes);

// Copies the files of fixture `name` into `dest` (created), writable.
void CopyFixture(const std::string& name, const std::string& dest);

// The header JSON text of a safetensors file, and the size of its data.
struct SplitFile {
  std::string header;
  uint64_t data_size = 0;
};
SplitFile SplitSafetensors(const std::string& bytes);

// Writes a safetensors file: 8-byte length, `header`, then `data_size` zero
// bytes (a sparse extension, so large sizes cost nothing).
void WriteSafetensors(const std::string& path, const std::string& header, uint64_t data_size);

// A header for tensors laid out back to back: `tensors` maps name to
// {"dtype", "shape"}; data_offsets are filled in. Returns the header and the
// data size through `data_size`.
std::string PackedHeader(const nlohmann::json& tensors, uint64_t* data_size);

}  // namespace nightshift::checkpoint::testing
