// A temporary directory for a test, removed with its contents at the end.
// Test-only; one owner.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace nightshift::testutil {

class TempDir {
 public:
  // A fresh directory under $TMPDIR (or /tmp); aborts the test binary when
  // none can be made.
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "nightshift-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace nightshift::testutil
