#include "worker/engine/mapped_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "worker/checkpoint/test_util.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::PackedHeader;
using checkpoint::testing::TempDir;
using checkpoint::testing::WriteFileBytes;

constexpr int64_t kRows = 4096;
constexpr uint64_t kRowBytes = 2048;  // F16 [4096, 1024]: 8 MB, rows 2 KB apart

uint64_t Page() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

// Byte i of row r.
unsigned char Pattern(int64_t r, uint64_t i) { return static_cast<unsigned char>(r * 7 + i * 13); }

// A one-tensor safetensors file ("table", the pattern above), written to
// disk and dropped from the page cache, and the checkpoint describing it.
checkpoint::Checkpoint WriteTable(const std::string& path) {
  uint64_t data_size = 0;
  const std::string header =
      PackedHeader({{"table", {{"dtype", "F16"}, {"shape", {kRows, kRowBytes / 2}}}}}, &data_size);
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);  // little-endian
  bytes += header;
  for (int64_t r = 0; r < kRows; ++r) {
    for (uint64_t i = 0; i < kRowBytes; ++i) bytes += static_cast<char>(Pattern(r, i));
  }
  WriteFileBytes(path, bytes);
  const int fd = open(path.c_str(), O_RDONLY);
  fdatasync(fd);  // dirty pages cannot be dropped
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);

  checkpoint::Checkpoint ckpt;
  ckpt.files.push_back({"model.safetensors", path, bytes.size(), 8 + header.size()});
  checkpoint::TensorInfo table;
  table.name = "table";
  table.dtype = checkpoint::DType::kF16;
  table.shape = {kRows, static_cast<int64_t>(kRowBytes / 2)};
  table.offset = 8 + header.size();
  table.size = data_size;
  ckpt.tensors.push_back(table);
  return ckpt;
}

// The file's pages in the page cache (by index), within the tensor's data.
std::set<uint64_t> CachedPages(const checkpoint::Checkpoint& ckpt) {
  const checkpoint::FileInfo& file = ckpt.files[0];
  const int fd = open(file.path.c_str(), O_RDONLY);
  void* map = mmap(nullptr, file.size, PROT_READ, MAP_SHARED, fd, 0);
  std::vector<unsigned char> resident((file.size + Page() - 1) / Page());
  mincore(map, file.size, resident.data());
  munmap(map, file.size);
  close(fd);
  std::set<uint64_t> cached;
  for (uint64_t p = file.data_offset / Page(); p < resident.size(); ++p) {
    if (resident[p] & 1) cached.insert(p);
  }
  return cached;
}

// The pages row r of the table lies on.
std::set<uint64_t> RowPages(const checkpoint::TensorInfo& table, int64_t r) {
  const uint64_t begin = table.offset + static_cast<uint64_t>(r) * kRowBytes;
  std::set<uint64_t> pages;
  for (uint64_t p = begin / Page(); p <= (begin + kRowBytes - 1) / Page(); ++p) pages.insert(p);
  return pages;
}

bool Contains(const std::set<uint64_t>& set, const std::set<uint64_t>& subset) {
  for (uint64_t p : subset) {
    if (set.count(p) == 0) return false;
  }
  return true;
}

// The rows asked for are read, all of them and (nearly) nothing else, without
// touching the mapping; touching another row afterwards reads that row's
// page, not the device's read-ahead around it.
TEST(MappedCheckpointTest, PrefetchRowsReadsTheRowsPagesAndATouchReadsNoMore) {
  TempDir tmp;
  const checkpoint::Checkpoint ckpt = WriteTable(tmp.file("model.safetensors"));
  const checkpoint::TensorInfo& table = ckpt.tensors[0];
  ASSERT_TRUE(CachedPages(ckpt).empty()) << "the test's file system keeps dropped pages cached";
  StatusOr<std::unique_ptr<MappedCheckpoint>> mapped = MappedCheckpoint::Open(ckpt);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();

  const std::vector<int64_t> rows = {3000, 5, 5, 6, 1200, kRows - 1};
  std::set<uint64_t> wanted;
  for (int64_t r : rows) {
    const std::set<uint64_t> pages = RowPages(table, r);
    wanted.insert(pages.begin(), pages.end());
  }
  (*mapped)->PrefetchRows(table, rows, kRowBytes);
  // The reads were only queued: wait for them (without touching the mapping).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::set<uint64_t> cached = CachedPages(ckpt);
  while (!Contains(cached, wanted) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    cached = CachedPages(ckpt);
  }
  ASSERT_TRUE(Contains(cached, wanted));
  // Only the rows' pages were asked for (the fs may add a page or two).
  EXPECT_LE(cached.size(), wanted.size() + 4) << "pages cached beyond the rows asked for";

  const unsigned char* data = (*mapped)->Data(table);
  for (int64_t r : rows) {
    for (uint64_t i = 0; i < kRowBytes; i += 97) {
      ASSERT_EQ(data[static_cast<uint64_t>(r) * kRowBytes + i], Pattern(r, i)) << r << " " << i;
    }
  }
  const int64_t touched = 2000;
  EXPECT_EQ(data[touched * kRowBytes + 1], Pattern(touched, 1));
  const std::set<uint64_t> after = CachedPages(ckpt);
  EXPECT_TRUE(Contains(after, RowPages(table, touched)));
  // The device's read-ahead around a fault is 32 pages or more (128 KB by
  // default, 8 MB on this project's virtio disk).
  EXPECT_LE(after.size(), cached.size() + 4) << "a touch read more than its page";
}

}  // namespace
}  // namespace nightshift::engine
