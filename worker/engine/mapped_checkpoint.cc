#include "worker/engine/mapped_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace nightshift::engine {
namespace {

uint64_t PageSize() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

MappedCheckpoint::~MappedCheckpoint() {
  for (Mapping& m : files_) {
    if (m.base != nullptr) munmap(m.base, m.size);
    if (m.fd >= 0) close(m.fd);
  }
}

StatusOr<std::unique_ptr<MappedCheckpoint>> MappedCheckpoint::Open(
    const checkpoint::Checkpoint& checkpoint) {
  std::unique_ptr<MappedCheckpoint> mapped(new MappedCheckpoint());
  for (const checkpoint::FileInfo& file : checkpoint.files) {
    Mapping& m = mapped->files_.emplace_back();
    m.fd = open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (m.fd < 0) return DataLoss(file.path + ": cannot open: " + std::strerror(errno));
    struct stat st;
    if (fstat(m.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != file.size) {
      return DataLoss(file.path + ": size changed since its header was read");
    }
    m.size = file.size;
    void* base = mmap(nullptr, m.size, PROT_READ, MAP_SHARED, m.fd, 0);
    if (base == MAP_FAILED) return DataLoss(file.path + ": mmap failed: " + std::strerror(errno));
    m.base = static_cast<unsigned char*>(base);
  }
  return mapped;
}

const unsigned char* MappedCheckpoint::Data(const checkpoint::TensorInfo& tensor) const {
  return files_[static_cast<size_t>(tensor.file)].base + tensor.offset;
}

void MappedCheckpoint::PrefetchRows(const checkpoint::TensorInfo& tensor,
                                    const std::vector<int64_t>& rows, uint64_t row_bytes) const {
  const Mapping& m = files_[static_cast<size_t>(tensor.file)];
  const uint64_t page = PageSize();
  const uint64_t first_page = tensor.offset / page * page;
  madvise(m.base + first_page, tensor.offset + tensor.size - first_page, MADV_RANDOM);
  std::vector<int64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  // Pages [begin, end) of the file, grown while the next row's pages touch them.
  uint64_t begin = 0, end = 0;
  for (int64_t row : sorted) {
    const uint64_t at = tensor.offset + static_cast<uint64_t>(row) * row_bytes;
    const uint64_t row_begin = at / page * page;
    const uint64_t row_end = (at + row_bytes + page - 1) / page * page;
    if (end > begin && row_begin <= end) {
      end = std::max(end, row_end);
      continue;
    }
    if (end > begin) {
      posix_fadvise(m.fd, static_cast<off_t>(begin), static_cast<off_t>(end - begin),
                    POSIX_FADV_WILLNEED);
    }
    begin = row_begin;
    end = row_end;
  }
  if (end > begin) {
    posix_fadvise(m.fd, static_cast<off_t>(begin), static_cast<off_t>(end - begin),
                  POSIX_FADV_WILLNEED);
  }
}

void MappedCheckpoint::Release(const std::vector<const checkpoint::TensorInfo*>& tensors) const {
  const uint64_t page = PageSize();
  for (const checkpoint::TensorInfo* t : tensors) {
    const Mapping& m = files_[static_cast<size_t>(t->file)];
    // Whole pages only: a page shared with a neighbour is simply read again.
    uint64_t begin = (t->offset + page - 1) / page * page;
    uint64_t end = (t->offset + t->size) / page * page;
    if (end > begin) madvise(m.base + begin, end - begin, MADV_DONTNEED);
    posix_fadvise(m.fd, static_cast<off_t>(t->offset), static_cast<off_t>(t->size),
                  POSIX_FADV_DONTNEED);
  }
}

}  // namespace nightshift::engine
