// Helpers for the checkpoint reader's tests: fixture paths, temporary
// directories and hand-built safetensors files. Test-only; not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace nightshift::checkpoint::testing {

// $NIGHTSHIFT_TEST_DATA/models/<name>; aborts the test binary when the
// variable is unset (ctest sets it).
std::string FixtureDir(const std::string& name);

// The fixture names under $NIGHTSHIFT_TEST_DATA/models, sorted.
std::vector<std::string> FixtureNames();

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

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
