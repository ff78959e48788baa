// A small tmpfs for tests of a full disk: mounted over a fresh directory,
// filled to a few KiB of its end on demand, unmounted at the end. Needs
// root (CAP_SYS_ADMIN); Mount says why when it cannot, so a test can skip
// outside CI (which runs as root) and fail inside it.
// Test-only; one owner.
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/temp_dir.h"

namespace nightshift::testutil {

class TinyFilesystem {
 public:
  // A tmpfs of `bytes` over a fresh directory; nullptr with `why` set when
  // it cannot be mounted (not root, or mount(2) refused).
  static std::unique_ptr<TinyFilesystem> Mount(int64_t bytes, std::string* why) {
    if (::geteuid() != 0) {
      *why = "mounting a tmpfs needs root (CI runs this test as root)";
      return nullptr;
    }
    std::unique_ptr<TinyFilesystem> fs(new TinyFilesystem());
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", fs->dir_.path().c_str(), "tmpfs", 0, options.c_str()) != 0) {
      *why = "mount -t tmpfs -o " + options + " " + fs->dir_.path() + ": " + std::strerror(errno);
      return nullptr;
    }
    fs->mounted_ = true;
    return fs;
  }
  ~TinyFilesystem() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }

  const std::string& path() const { return dir_.path(); }
  std::string file(const std::string& name) const { return dir_.file(name); }

  // Bytes still free.
  int64_t FreeBytes() const {
    struct statvfs st;
    if (::statvfs(dir_.path().c_str(), &st) != 0) return -1;
    return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  }

  // Writes filler files until at most `leave` bytes are free. True when it
  // got there.
  bool Fill(int64_t leave) {
    const std::vector<char> block(4096, 'x');
    const int fd = ::open(file(".filler-" + std::to_string(fillers_++)).c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    while (FreeBytes() > leave) {
      if (::write(fd, block.data(), block.size()) <= 0) break;
    }
    ::close(fd);
    return FreeBytes() <= leave;
  }

  // Removes every filler file Fill wrote.
  void Free() {
    for (int i = 0; i < fillers_; ++i) ::unlink(file(".filler-" + std::to_string(i)).c_str());
    fillers_ = 0;
  }

 private:
  TinyFilesystem() = default;
  TempDir dir_;
  bool mounted_ = false;
  int fillers_ = 0;
};

}  // namespace nightshift::testutil
