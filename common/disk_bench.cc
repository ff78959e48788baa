#include "common/disk_bench.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "common/read_buffer.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kAlignment = 4096;

struct FileSpan {
  std::string path;
  uint64_t bytes = 0;  // bytes of this file the benchmark reads (a prefix)
};

struct Chunk {
  int file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

std::string ErrnoText(int err) { return std::strerror(err); }

StatusOr<std::vector<std::string>> ListFiles(const std::string& path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return NotFound(path + ": no such file or directory");
  if (fs::is_regular_file(status)) return std::vector<std::string>{path};
  if (!fs::is_directory(status)) return InvalidArgument(path + ": not a file or a directory");
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(path, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (fs::is_regular_file(it->path(), ec)) files.push_back(it->path().string());
  }
  if (ec) return Unavailable(path + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

// The files' prefixes that add up to at most `max_bytes` (0 = everything).
StatusOr<std::vector<FileSpan>> PlanSpans(const std::vector<std::string>& files, uint64_t max_bytes,
                                          uint64_t* total_bytes) {
  std::vector<FileSpan> spans;
  uint64_t planned = 0;
  *total_bytes = 0;
  for (const std::string& file : files) {
    std::error_code ec;
    uint64_t size = fs::file_size(file, ec);
    if (ec) return Unavailable(file + ": " + ec.message());
    *total_bytes += size;
    uint64_t take = max_bytes == 0 ? size : std::min(size, max_bytes - planned);
    if (take > 0) spans.push_back({file, take});
    planned += take;
  }
  return spans;
}

std::vector<Chunk> Chunks(const std::vector<FileSpan>& spans, uint64_t chunk_bytes) {
  std::vector<Chunk> chunks;
  for (size_t f = 0; f < spans.size(); ++f) {
    for (uint64_t offset = 0; offset < spans[f].bytes; offset += chunk_bytes) {
      chunks.push_back(
          {static_cast<int>(f), offset, std::min(chunk_bytes, spans[f].bytes - offset)});
    }
  }
  return chunks;
}

// Asks the kernel to forget the files' cached pages.
void DropCache(const std::vector<FileSpan>& spans) {
  for (const FileSpan& span : spans) {
    int fd = ::open(span.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Share of the spans' pages resident in the page cache (mincore).
double CachedFraction(const std::vector<FileSpan>& spans) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t pages = 0, resident = 0;
  for (const FileSpan& span : spans) {
    int fd = ::open(span.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    void* map = ::mmap(nullptr, span.bytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) continue;
    std::vector<unsigned char> vec((span.bytes + page - 1) / page);
    if (::mincore(map, span.bytes, vec.data()) == 0) {
      pages += vec.size();
      for (unsigned char v : vec) resident += v & 1;
    }
    ::munmap(map, span.bytes);
  }
  return pages == 0 ? 0.0 : static_cast<double>(resident) / static_cast<double>(pages);
}

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};

// Shared by the reader threads of one mode.
struct ModeRun {
  const std::vector<FileSpan>* spans;
  const std::vector<Chunk>* chunks;
  std::vector<int> fds;
  uint64_t buffer_bytes = 0;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex mu;
  Status error;  // first failure, guarded by mu

  void Fail(Status st) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = std::move(st);
    next = chunks->size();  // stop the other readers
  }
};

void ReadChunks(ModeRun& run) {
  // As the engine's loader reads (huge pages from 2 MB up).
  char* raw = static_cast<char*>(AllocateReadBuffer(run.buffer_bytes));
  if (raw == nullptr) {
    run.Fail(ResourceExhausted("cannot allocate a read buffer"));
    return;
  }
  std::unique_ptr<char, AlignedFree> buffer(raw);
  for (size_t i = run.next++; i < run.chunks->size(); i = run.next++) {
    const Chunk& c = (*run.chunks)[i];
    // O_DIRECT wants aligned lengths; a short read at the end of the file
    // returns what is there.
    uint64_t length = (c.length + kAlignment - 1) / kAlignment * kAlignment;
    ssize_t got = ::pread(run.fds[c.file], buffer.get(), length, static_cast<off_t>(c.offset));
    const std::string& path = (*run.spans)[c.file].path;
    if (got < 0) {
      run.Fail(Unavailable(path + ": read failed: " + ErrnoText(errno)));
      return;
    }
    if (static_cast<uint64_t>(got) < c.length) {
      run.Fail(DataLoss(path + ": shorter than when the benchmark started"));
      return;
    }
    run.bytes += c.length;
  }
}

// Opens every span's file; EINVAL on O_DIRECT means the filesystem refuses it.
Status OpenAll(const std::vector<FileSpan>& spans, bool direct, std::vector<int>& fds) {
  for (const FileSpan& span : spans) {
    int fd = ::open(span.path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0) {
      int err = errno;
      if (direct && err == EINVAL) return Unimplemented("O_DIRECT is not supported here");
      return Unavailable(span.path + ": " + ErrnoText(err));
    }
    fds.push_back(fd);
  }
  return Status::Ok();
}

Status RunMode(const std::vector<FileSpan>& spans, const std::vector<Chunk>& chunks,
               uint64_t chunk_bytes, DiskBenchMode& mode) {
  DropCache(spans);
  if (!mode.direct) mode.cached_fraction = CachedFraction(spans);
  ModeRun run;
  run.spans = &spans;
  run.chunks = &chunks;
  run.buffer_bytes = chunk_bytes;
  Status opened = OpenAll(spans, mode.direct, run.fds);
  if (opened.ok()) {
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> readers;
    for (int i = 0; i < mode.streams; ++i) readers.emplace_back(ReadChunks, std::ref(run));
    for (std::thread& t : readers) t.join();
    mode.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  for (int fd : run.fds) ::close(fd);
  if (!opened.ok()) {
    if (opened.code() != StatusCode::kUnimplemented) return opened;
    mode.skipped_reason = opened.message();
    return Status::Ok();
  }
  if (!run.error.ok()) {
    // Some filesystems accept O_DIRECT at open and refuse it at read.
    if (mode.direct && run.error.message().find(ErrnoText(EINVAL)) != std::string::npos) {
      mode.skipped_reason = "O_DIRECT reads are refused here";
      return Status::Ok();
    }
    return run.error;
  }
  mode.ran = true;
  mode.bytes = run.bytes;
  mode.gbs = mode.seconds > 0 ? static_cast<double>(mode.bytes) / mode.seconds / 1e9 : 0.0;
  DropCache(spans);  // leave the cache as cold as we found it
  return Status::Ok();
}

DiskBenchMode Mode(bool direct, int streams) {
  DiskBenchMode m;
  m.direct = direct;
  m.streams = streams;
  m.name = std::to_string(streams) + (streams == 1 ? " stream, " : " streams, ") +
           (direct ? "O_DIRECT" : "buffered");
  return m;
}

}  // namespace

void ChooseReadMode(DiskBenchResult& r) {
  int single = -1, parallel = -1;
  r.single_stream_gbs = r.parallel_gbs = 0;
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const DiskBenchMode& m = r.modes[i];
    if (!m.ran) continue;
    int& best = m.streams == 1 ? single : parallel;
    if (best < 0 || m.gbs > r.modes[static_cast<size_t>(best)].gbs) best = static_cast<int>(i);
  }
  if (single >= 0) r.single_stream_gbs = r.modes[static_cast<size_t>(single)].gbs;
  if (parallel >= 0) r.parallel_gbs = r.modes[static_cast<size_t>(parallel)].gbs;
  r.parallel_chosen =
      parallel >= 0 && (single < 0 || r.parallel_gbs >= kParallelReadMargin * r.single_stream_gbs);
  r.fastest = r.parallel_chosen ? parallel : single;
  r.read_gbs = r.fastest >= 0 ? r.modes[static_cast<size_t>(r.fastest)].gbs : 0;
}

StatusOr<DiskBenchResult> RunDiskBench(const std::string& path, const DiskBenchOptions& options) {
  if (options.chunk_bytes == 0) return InvalidArgument("chunk size must be positive");
  if (options.parallel_reads < 2 || options.parallel_reads > 64) {
    return InvalidArgument("parallel reads must be between 2 and 64");
  }
  if (options.rounds < 1 || options.rounds > 10) {
    return InvalidArgument("rounds must be between 1 and 10");
  }
  const uint64_t chunk_bytes = (options.chunk_bytes + kAlignment - 1) / kAlignment * kAlignment;
  DiskBenchResult result;
  result.path = path;
  NS_ASSIGN_OR_RETURN(result.files, ListFiles(path));
  NS_ASSIGN_OR_RETURN(std::vector<FileSpan> spans,
                      PlanSpans(result.files, options.max_bytes, &result.total_bytes));
  if (spans.empty()) return InvalidArgument(path + ": nothing to read (no non-empty file)");
  const std::vector<Chunk> chunks = Chunks(spans, chunk_bytes);
  for (const Chunk& c : chunks) result.bytes_per_mode += c.length;

  for (bool direct : {true, false}) {
    for (int streams : {1, options.parallel_reads}) result.modes.push_back(Mode(direct, streams));
  }
  for (int round = 0; round < options.rounds; ++round) {
    for (DiskBenchMode& kept : result.modes) {
      if (round > 0 && !kept.ran) continue;  // skipped: the filesystem refuses it
      DiskBenchMode run = Mode(kept.direct, kept.streams);
      NS_RETURN_IF_ERROR(RunMode(spans, chunks, chunk_bytes, run));
      if (!run.ran) {
        if (round == 0) kept = run;
        continue;
      }
      std::vector<double> rounds = std::move(kept.round_gbs);
      rounds.push_back(run.gbs);
      if (round == 0 || run.gbs > kept.gbs) kept = run;
      kept.round_gbs = std::move(rounds);
    }
  }
  ChooseReadMode(result);
  return result;
}

}  // namespace nightshift
