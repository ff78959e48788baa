#include "worker/engine/layer_loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/read_buffer.h"
#include "planner/model_facts.h"

namespace nightshift::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Reads start and end on this boundary of the file and of the buffer, as
// O_DIRECT requires: each span's region of the buffer starts on it, and the
// span sits at its file offset modulo it (so tensors also keep the alignment
// they have in the file).
constexpr uint64_t kAlign = 4096;
static_assert(kAlign == checkpoint::kPartAlign, "QuantizedTensor::part_offsets assume it");

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The test hook for a disk that fails under a pass (tests/e2e/fault_test.cc):
// when NIGHTSHIFT_TEST_READ_FAULTS names a file, each read first looks in it
// for a line "eio PATH-PART" (the read fails with EIO) or "short PATH-PART"
// (the file seems to end where the read starts) whose PATH-PART is in the
// path of the file read. The file is read again at every read, so a test
// turns a fault on and off while a worker runs. Unset (always, outside
// tests), it costs one check of a static.
enum class InjectedFault { kNone, kEio, kShort };

InjectedFault InjectedReadFault(const std::string& path) {
  static const char* const control = std::getenv("NIGHTSHIFT_TEST_READ_FAULTS");
  if (control == nullptr || *control == '\0') return InjectedFault::kNone;
  std::ifstream in(control);
  std::string mode, part;
  while (in >> mode >> part) {
    if (path.find(part) == std::string::npos) continue;
    if (mode == "eio") return InjectedFault::kEio;
    if (mode == "short") return InjectedFault::kShort;
  }
  return InjectedFault::kNone;
}

// A run of bytes of one file that a group reads with consecutive preads.
struct Span {
  int file = 0;
  uint64_t offset = 0;  // in the file
  uint64_t size = 0;
  uint64_t dst = 0;  // in the group's buffer
  int unit = 0;      // LayerLoaderOptions::units: whose bytes these are

  // The kAlign-aligned file range read for it, and where that lands.
  uint64_t read_offset() const { return offset / kAlign * kAlign; }
  uint64_t read_end() const { return RoundUp(offset + size, kAlign); }
  uint64_t read_dst() const { return dst - offset % kAlign; }
};

struct GroupLayout {
  std::vector<Span> spans;
  std::vector<uint64_t> tensor_dst;  // per tensor of the group: its position in the buffer
  uint64_t buffer_bytes = 0;
  uint64_t tensor_bytes = 0;
};

// Merges the group's tensors into spans of adjacent bytes of one unit
// (`units`, per tensor; empty: all of unit 0) and places them in a buffer.
GroupLayout Layout(const TensorList& group, const std::vector<int>& units) {
  auto unit_of = [&units](size_t i) { return units.empty() ? 0 : units[i]; };
  GroupLayout layout;
  std::vector<size_t> order(group.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(group[a]->file, group[a]->offset) <
           std::make_pair(group[b]->file, group[b]->offset);
  });
  layout.tensor_dst.resize(group.size());
  bool sealed = false;  // the last span is a quantized tensor's part: nothing extends it
  for (size_t i : order) {
    const checkpoint::TensorInfo& t = *group[i];
    layout.tensor_bytes += t.size;
    if (t.quant) {
      // Each part in its own region, where QuantizedTensor::part_offsets
      // says (the quantized kernels find the parts there).
      const checkpoint::QuantizedTensor& q = *t.quant;
      const uint64_t region = layout.buffer_bytes;
      const uint64_t first = region + q.parts[0].offset % kAlign;
      for (size_t k = 0; k < q.parts.size(); ++k) {
        const checkpoint::TensorInfo& p = q.parts[k];
        layout.spans.push_back({p.file, p.offset, p.size, first + q.part_offsets[k], unit_of(i)});
      }
      layout.tensor_dst[i] = first;
      layout.buffer_bytes = region + q.region_bytes;
      sealed = true;
      continue;
    }
    const bool extends = !sealed && !layout.spans.empty() && layout.spans.back().file == t.file &&
                         layout.spans.back().offset + layout.spans.back().size == t.offset &&
                         layout.spans.back().unit == unit_of(i);
    sealed = false;
    if (!extends) {
      const uint64_t dst = layout.buffer_bytes + t.offset % kAlign;
      layout.spans.push_back({t.file, t.offset, 0, dst, unit_of(i)});
    }
    Span& span = layout.spans.back();
    layout.tensor_dst[i] = span.dst + (t.offset - span.offset);
    span.size += t.size;
    layout.buffer_bytes = span.read_dst() + (span.read_end() - span.read_offset());
  }
  return layout;
}

using Buffer = std::shared_ptr<unsigned char>;

Buffer AlignedAlloc(uint64_t bytes) {
  void* p = AllocateReadBuffer(bytes);  // huge pages from 2 MB up
  if (p == nullptr) throw std::bad_alloc();
  return Buffer(static_cast<unsigned char*>(p), [](unsigned char* q) { std::free(q); });
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

struct LayerLoader::Impl {
  enum class State { kIdle, kReading, kReady };

  struct Group {
    TensorList tensors;
    GroupLayout layout;
    State state = State::kIdle;
    int slot = -1;          // buffer holding it while reading or ready
    size_t pending = 0;     // chunks not yet read
    bool fresh = false;     // read since it was last acquired
    bool pinned = false;    // kept in its own buffer after its first read
    bool skipped = false;   // never read again (Skip)
    bool deferred = false;  // LayerLoaderOptions::deferred
    // A deferred group's decision for this pass (Decide): nullopt while
    // undecided; empty to pass over it; else the units to read.
    std::optional<std::vector<bool>> decision;
    std::vector<bool> guess;       // Guess: units to read ahead of the decision
    bool guessed = false;          // being (or last) read from a guess, before its decision
    uint64_t requested_bytes = 0;  // tensor bytes of the units being (or last) read
    // Per unit (units past the end: false), while read or ready: whether its
    // reads were queued, and whether one of them has been read.
    std::vector<bool> queued_units;
    std::vector<bool> read_units;
    Status status;  // the first failed read's
    std::optional<Clock::time_point> first_read;
    Clock::time_point last_read;
  };

  struct File {
    std::string path;
    int fd = -1;         // buffered
    int direct_fd = -1;  // O_DIRECT, or -1 where not used or refused
    uint64_t size = 0;
  };

  // Reads of at most kSmallReadBytes go kSmallReadStreams at a time even
  // when fewer streams are asked for: a quantized layer is dozens of
  // separate reads (each tensor's packed weights, zero points and scales in
  // their own regions), most of them kilobytes, each waiting out the disk's
  // latency alone with one stream. A 1-sequence pass of bench-1.7b as AWQ
  // int4 (506 MB, 1 stream, O_DIRECT) took a median 0.178 s with one read in
  // flight and 0.142 s with four (AMD EPYC family 26, 2026-12-05).
  static constexpr uint64_t kSmallReadBytes = 16 << 20;
  static constexpr size_t kSmallReadStreams = 4;

  struct Chunk {
    size_t group;
    const File* file;
    uint64_t offset;    // kAlign-aligned
    uint64_t size;      // kAlign-aligned; may run past the end of the file
    uint64_t required;  // bytes of it the group needs (the rest is alignment)
    unsigned char* dst;
    int unit;
    uint64_t tensor_bytes;  // of the span's bytes, those in this chunk
  };

  LayerLoaderOptions options;
  std::vector<File> files;
  std::vector<Group> groups;
  // [0, stream_slots): the stream buffers (0, 1 or 2), each sized to the
  // largest group not pinned; then the look-ahead buffers (0 or 2), each
  // sized to the largest look-ahead group not pinned; then one per group,
  // used by the pinned ones.
  std::vector<Buffer> slots;
  size_t stream_slots = 0;
  size_t look_ahead_slots = 0;
  std::vector<int> free_slots;             // free stream buffers
  std::vector<int> free_look_ahead_slots;  // free look-ahead buffers
  uint64_t largest_buffer = 0;             // of the groups not pinned
  uint64_t look_ahead_buffer = 0;          // of the look-ahead groups not pinned
  // planner::LookAheadGroups of the deferred flags: the dense parts that a
  // prefetch reads past the undecided expert slices before them, into the
  // look-ahead buffers (with prefetch; they use no stream buffer).
  std::vector<bool> look_ahead;
  uint64_t largest_tensor_bytes = 0;
  size_t next = 0;  // the group Acquire expects
  std::optional<size_t> held;
  Status broken;

  std::mutex mu;
  std::condition_variable work;  // chunks queued or stopping
  std::condition_variable done;  // a group finished reading
  std::deque<Chunk> queue;
  // Reads in flight, all of one group (`reading_group`): a group's reads
  // start once the group before it is read. Two groups read at once share
  // the disk and arrive together, the first later than alone; then both
  // stream buffers are full while the first computes, and the disk idles.
  // With 128 MB reads and 90 MB layers, four streams read two layers at a
  // time so, and the disk idled ~20 ms every two layers: a 64-sequence pass
  // of bench-1.7b took 0.98-1.16 s against 0.72-0.98 s one group at a time
  // (AMD EPYC family 25, 2026-12-03).
  size_t in_flight = 0;
  size_t reading_group = 0;
  bool stopping = false;
  std::vector<std::thread> threads;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
      queue.clear();
    }
    work.notify_all();
    for (std::thread& t : threads) t.join();
    for (const File& f : files) {
      if (f.fd >= 0) close(f.fd);
      if (f.direct_fd >= 0) close(f.direct_fd);
    }
  }

  // Reads in flight at most for the chunk at the front of the queue: the
  // asked streams for large reads; more for a small one, which waits on the
  // disk's latency rather than its bandwidth (see kSmallReadBytes).
  size_t MostInFlight(const Chunk& c) const {
    const size_t asked = static_cast<size_t>(options.read_streams);
    return c.size <= kSmallReadBytes ? std::max(asked, kSmallReadStreams) : asked;
  }

  void ReadLoop() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      work.wait(lock, [this] {
        if (stopping) return true;
        if (queue.empty()) return false;
        const Chunk& front = queue.front();
        return in_flight == 0 || (front.group == reading_group && in_flight < MostInFlight(front));
      });
      if (stopping) return;
      Chunk chunk = queue.front();
      queue.pop_front();
      ++in_flight;
      reading_group = chunk.group;
      Group& g = groups[chunk.group];
      if (!g.first_read) g.first_read = Clock::now();
      lock.unlock();
      Status st = ReadChunk(chunk);
      lock.lock();
      if (--in_flight == 0) work.notify_all();  // the next group's reads may start
      if (!st.ok() && g.status.ok()) g.status = st;
      g.last_read = Clock::now();
      MarkUnit(g.read_units, chunk.unit);
      if (--g.pending == 0) Ready(g);
    }
  }

  // Reads the chunk with O_DIRECT when the file has such a descriptor (and
  // the kernel takes the read), else through the page cache, whose copy is
  // dropped afterwards: the bytes are ours now.
  static Status ReadChunk(const Chunk& c) {
    bool direct = c.file->direct_fd >= 0;
    uint64_t done_bytes = 0;
    const InjectedFault fault = InjectedReadFault(c.file->path);
    while (done_bytes < c.required) {
      ssize_t n = pread(direct ? c.file->direct_fd : c.file->fd, c.dst + done_bytes,
                        c.size - done_bytes, static_cast<off_t>(c.offset + done_bytes));
      if (fault == InjectedFault::kEio) {
        n = -1;
        errno = EIO;
      } else if (fault == InjectedFault::kShort) {
        n = 0;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct) {
        direct = false;
        continue;
      }
      if (n < 0) {
        return DataLoss(c.file->path + ": read at offset " + std::to_string(c.offset + done_bytes) +
                        " failed: " + std::strerror(errno));
      }
      if (n == 0) {
        return DataLoss(c.file->path + ": file ends before offset " +
                        std::to_string(c.offset + c.required));
      }
      done_bytes += static_cast<uint64_t>(n);
    }
    if (!direct) {
      posix_fadvise(c.file->fd, static_cast<off_t>(c.offset), static_cast<off_t>(c.size),
                    POSIX_FADV_DONTNEED);
    }
    return Status::Ok();
  }

  // Each chunk's pages are dropped after its read, but that leaves some: the
  // kernel caches a file in folios of up to megabytes and drops only those
  // wholly inside the range it is given (a folio across two chunks stays, and
  // so does the file's last one, which reaches past the end of the file), and
  // read-ahead from one group's reads can cache the next group's pages after
  // that group's own read dropped them (two groups' reads overlap). On the
  // 1.7 GB bench checkpoint 160-260 MB stayed cached after a run. So when a
  // group is acquired, and every read of it and of the groups before it has
  // finished, drop everything up to its end in each of its files, or the
  // whole file when it ends the file. What lies beyond is the next group's,
  // read ahead for it. A range with nothing cached costs next to nothing.
  void DropCachedUpTo(const Group& g) {
    std::vector<uint64_t> end(files.size(), 0);
    for (const Span& span : g.layout.spans) {
      uint64_t& e = end[static_cast<size_t>(span.file)];
      e = std::max(e, span.read_end());
    }
    for (size_t f = 0; f < files.size(); ++f) {
      if (end[f] == 0) continue;
      const off_t length =
          end[f] >= files[f].size ? 0 : static_cast<off_t>(end[f]);  // 0: to the end
      posix_fadvise(files[f].fd, 0, length, POSIX_FADV_DONTNEED);
    }
  }

  // Lays out the buffers for the groups' pinned flags: stream buffers for
  // the others (none when all are pinned), one slot per pinned group.
  void PlanSlots() {
    bool all_pinned = true;
    largest_buffer = look_ahead_buffer = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      const Group& g = groups[i];
      if (g.pinned) continue;
      all_pinned = false;
      largest_buffer = std::max(largest_buffer, g.layout.buffer_bytes);
      if (look_ahead[i]) look_ahead_buffer = std::max(look_ahead_buffer, g.layout.buffer_bytes);
    }
    stream_slots = all_pinned ? 0 : (options.prefetch ? 2 : 1);
    look_ahead_slots = options.prefetch && look_ahead_buffer > 0 ? 2 : 0;
    slots.assign(stream_slots + look_ahead_slots + groups.size(), nullptr);
    free_slots.clear();
    for (size_t s = stream_slots; s > 0; --s) free_slots.push_back(static_cast<int>(s - 1));
    free_look_ahead_slots.clear();
    for (size_t s = look_ahead_slots; s > 0; --s) {
      free_look_ahead_slots.push_back(static_cast<int>(stream_slots + s - 1));
    }
  }

  // The slot group `index` keeps when pinned.
  size_t PinnedSlot(size_t index) const { return stream_slots + look_ahead_slots + index; }
  bool IsLookAheadSlot(int slot) const {
    const size_t s = static_cast<size_t>(slot);
    return s >= stream_slots && s < stream_slots + look_ahead_slots;
  }
  // Whether group `index`, not pinned, reads into a look-ahead buffer.
  bool ReadsAhead(size_t index) const { return look_ahead_slots > 0 && look_ahead[index]; }
  // Gives a stream or look-ahead buffer back (`mu` held).
  void FreeSlot(int slot) {
    (IsLookAheadSlot(slot) ? free_look_ahead_slots : free_slots).push_back(slot);
  }

  unsigned char* SlotData(int slot) {
    Buffer& b = slots[static_cast<size_t>(slot)];
    if (!b) {
      const size_t s = static_cast<size_t>(slot);
      const uint64_t bytes = s < stream_slots ? largest_buffer
                             : IsLookAheadSlot(slot)
                                 ? look_ahead_buffer
                                 : groups[s - PinnedSlot(0)].layout.buffer_bytes;
      b = options.allocate ? options.allocate(bytes) : AlignedAlloc(bytes);
      if (!b) throw std::bad_alloc();
      if (reinterpret_cast<uintptr_t>(b.get()) % kAlign != 0) {
        throw std::invalid_argument("layer loader: a buffer is not 4096-aligned");
      }
    }
    return b.get();
  }

  // Starts reading group `index` when it is idle and a buffer is free;
  // false when it is idle and no buffer is free.
  bool Request(size_t index) {
    std::lock_guard<std::mutex> lock(mu);
    Group& g = groups[index];
    if (g.state != State::kIdle) return true;
    int slot;
    if (g.pinned) {
      slot = static_cast<int>(PinnedSlot(index));
    } else {
      std::vector<int>& free = ReadsAhead(index) ? free_look_ahead_slots : free_slots;
      if (free.empty()) return false;
      slot = free.back();
      free.pop_back();
    }
    Begin(g, slot, false);
    // A streamed deferred group reads the units decided; a pinned one, kept
    // for later passes, reads them all.
    const std::vector<bool>* units =
        g.deferred && !g.pinned && g.decision && !g.decision->empty() ? &*g.decision : nullptr;
    for (const Span& span : g.layout.spans) {
      if (units == nullptr || Marked(*units, span.unit)) QueueSpan(index, span);
    }
    if (g.pending == 0) {  // nothing of it wanted: ready as it is
      g.first_read = Clock::now();
      g.last_read = *g.first_read;
      Ready(g);
    }
    work.notify_all();
    return true;
  }

  static bool Marked(const std::vector<bool>& units, int unit) {
    return static_cast<size_t>(unit) < units.size() && units[static_cast<size_t>(unit)];
  }
  static void MarkUnit(std::vector<bool>& units, int unit) {
    if (static_cast<size_t>(unit) >= units.size()) units.resize(static_cast<size_t>(unit) + 1);
    units[static_cast<size_t>(unit)] = true;
  }

  // Group `g` starts a read into `slot`, nothing queued yet (`mu` held).
  void Begin(Group& g, int slot, bool guessed) {
    SlotData(slot);  // allocated before any read lands in it
    g.slot = slot;
    g.state = State::kReading;
    g.status = Status::Ok();
    g.first_read.reset();
    g.requested_bytes = 0;
    g.guessed = guessed;
    g.queued_units.clear();
    g.read_units.clear();
  }

  // Queues the reads of one span of group `index`, into its slot (`mu` held).
  void QueueSpan(size_t index, const Span& span) {
    Group& g = groups[index];
    unsigned char* const base = slots[static_cast<size_t>(g.slot)].get();
    const uint64_t chunk = RoundUp(options.chunk_bytes, kAlign);
    const uint64_t begin = span.read_offset(), end = span.read_end();
    for (uint64_t at = begin; at < end; at += chunk) {
      const uint64_t n = std::min(chunk, end - at);
      const uint64_t required = std::min(n, span.offset + span.size - at);
      const uint64_t first = std::max(at, span.offset);
      const uint64_t tensor_bytes = std::min(at + n, span.offset + span.size) - first;
      queue.push_back({index, &files[static_cast<size_t>(span.file)], at, n, required,
                       base + span.read_dst() + (at - begin), span.unit, tensor_bytes});
      ++g.pending;
      g.requested_bytes += tensor_bytes;
    }
    MarkUnit(g.queued_units, span.unit);
  }

  // The last read of group `g` has ended (or none was needed; `mu` held).
  void Ready(Group& g) {
    g.state = State::kReady;
    g.fresh = true;
    done.notify_all();
  }

  // Starts reading the guessed units of deferred group `index` (Guess) when
  // it is undecided, idle and a stream buffer is free.
  void RequestGuess(size_t index) {
    std::lock_guard<std::mutex> lock(mu);
    Group& g = groups[index];
    if (std::find(g.guess.begin(), g.guess.end(), true) == g.guess.end() || g.pinned || g.skipped ||
        g.decision || g.state != State::kIdle || ReadsAhead(index) || free_slots.empty()) {
      return;
    }
    const int slot = free_slots.back();
    free_slots.pop_back();
    Begin(g, slot, true);
    for (const Span& span : g.layout.spans) {
      if (Marked(g.guess, span.unit)) QueueSpan(index, span);
    }
    if (g.pending == 0) {  // the guessed units hold no tensor: nothing to read
      FreeSlot(g.slot);
      g.slot = -1;
      g.state = State::kIdle;
      return;
    }
    work.notify_all();
  }

  // The decision for group `index`, read (or being read) from a guess
  // (`lock` holds `mu`): the reads of units it does not ask for that have not
  // started are taken back, and those it asks for that were not guessed are
  // queued. Passed over (`units` empty), the group gives its buffer back
  // once its reads in flight end.
  void Settle(size_t index, const std::vector<bool>& units, std::unique_lock<std::mutex>& lock) {
    Group& g = groups[index];
    for (auto it = queue.begin(); it != queue.end();) {
      if (it->group != index || Marked(units, it->unit)) {
        ++it;
        continue;
      }
      g.requested_bytes -= it->tensor_bytes;
      --g.pending;
      it = queue.erase(it);
    }
    if (units.empty()) {
      done.wait(lock, [&g] { return g.pending == 0; });
      FreeSlot(g.slot);
      g.slot = -1;
      g.state = State::kIdle;
      g.fresh = false;
      g.guessed = false;
      return;
    }
    for (const Span& span : g.layout.spans) {
      if (Marked(units, span.unit) && !Marked(g.queued_units, span.unit)) {
        QueueSpan(index, span);
      }
    }
    if (g.pending > 0) {
      g.state = State::kReading;
      work.notify_all();
    } else if (g.state == State::kReading) {  // its last reads were taken back
      Ready(g);
    }
  }

  // After Acquire(index): starts reading the next groups not in memory, in
  // order, as many as there are stream buffers (one when all are pinned).
  // Pinned groups already read cost nothing and are passed over, so the
  // disk reads ahead across them. Deferred groups not decided yet stop it,
  // except that the group after them is read when it is a look-ahead group
  // (a sparse layer's dense part), into a look-ahead buffer: so the disk
  // reads while the layer before computes its routing. Look-ahead groups
  // take no stream buffer.
  void Prefetch(size_t index) {
    const size_t window = std::max<size_t>(stream_slots, 1);
    size_t ahead = 0;
    bool undecided = false;  // passed over deferred groups not decided yet
    std::optional<size_t> first_undecided;
    for (size_t step = 1; step < groups.size() && ahead < window; ++step) {
      const size_t j = (index + step) % groups.size();
      const Group& g = groups[j];
      if (g.skipped) continue;
      State state;
      {
        std::lock_guard<std::mutex> lock(mu);
        state = g.state;
      }
      if (g.pinned && state == State::kReady) continue;  // in memory for good
      if (g.deferred && !g.decision) {                   // undecided: keep the order
        if (!undecided) first_undecided = j;
        undecided = true;
        continue;
      }
      if (g.deferred && g.decision->empty()) continue;  // this pass passes over it
      const bool reads_ahead = !g.pinned && ReadsAhead(j);
      if (undecided) {
        if (reads_ahead && state == State::kIdle) Request(j);
        break;
      }
      if (state == State::kIdle && !Request(j)) return;  // no buffer free: keep the order
      if (!reads_ahead) ++ahead;
    }
    // Last, after every read the pass will need: the next undecided group's guess.
    if (first_undecided) RequestGuess(*first_undecided);
  }

  // Blocks until no group is being read (`lock` holds `mu`).
  void WaitForReads(std::unique_lock<std::mutex>& lock) {
    done.wait(lock, [this] {
      return std::none_of(groups.begin(), groups.end(),
                          [](const Group& g) { return g.state == State::kReading; });
    });
  }

  // After the pins or the order changed (no read in flight, `mu` held):
  // what the stream buffers hold must be among the next groups to read, in
  // order from `next`, as many as there are stream buffers, or Acquire
  // could find no buffer free for the group it expects. Any other group read
  // ahead is dropped (read again when its turn comes).
  void DropStaleReadAhead() {
    std::vector<size_t> upcoming;
    for (size_t step = 0, j = next; step < groups.size() && upcoming.size() < stream_slots;
         ++step, j = (j + 1) % groups.size()) {
      const Group& g = groups[j];
      if (g.skipped || (g.pinned && g.state == State::kReady)) continue;
      if (g.deferred && !g.decision) break;
      if (g.deferred && g.decision->empty()) continue;
      upcoming.push_back(j);
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      Group& g = groups[i];
      if (g.state != State::kReady || g.pinned) continue;
      if (std::find(upcoming.begin(), upcoming.end(), i) != upcoming.end()) continue;
      FreeSlot(g.slot);
      g.state = State::kIdle;
      g.slot = -1;
      g.fresh = false;
      g.guessed = false;
    }
  }

  // The group after `index` in acquisition order (skipped ones passed over).
  size_t After(size_t index) const {
    size_t j = index;
    for (size_t step = 0; step < groups.size(); ++step) {
      j = (j + 1) % groups.size();
      if (!groups[j].skipped) return j;
    }
    return index;
  }
};

LayerLoader::LayerLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerLoader::~LayerLoader() = default;

StatusOr<std::unique_ptr<LayerLoader>> LayerLoader::Open(const checkpoint::Checkpoint& checkpoint,
                                                         std::vector<TensorList> groups,
                                                         const LayerLoaderOptions& options) {
  if (groups.empty()) return InvalidArgument("no tensor groups to load");
  if (options.read_streams < 1 || options.read_streams > 64) {
    return InvalidArgument("read_streams must be in 1..64");
  }
  if (options.chunk_bytes == 0) return InvalidArgument("chunk_bytes must be > 0");
  if (!options.pinned.empty() && options.pinned.size() != groups.size()) {
    return InvalidArgument("pinned needs one flag per group");
  }
  if (!options.deferred.empty() && options.deferred.size() != groups.size()) {
    return InvalidArgument("deferred needs one flag per group");
  }
  if (!options.units.empty() && options.units.size() != groups.size()) {
    return InvalidArgument("units needs one list per group");
  }
  for (size_t i = 0; i < options.units.size(); ++i) {
    if (!options.units[i].empty() && options.units[i].size() != groups[i].size()) {
      return InvalidArgument("units needs one unit per tensor of group " + std::to_string(i));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  for (TensorList& tensors : groups) {
    if (tensors.empty()) return InvalidArgument("empty tensor group");
    const size_t index = impl->groups.size();
    Impl::Group& g = impl->groups.emplace_back();
    g.layout = Layout(tensors, options.units.empty() ? std::vector<int>{} : options.units[index]);
    g.deferred = !options.deferred.empty() && options.deferred[index];
    g.tensors = std::move(tensors);
    g.pinned = options.resident || (!options.pinned.empty() && options.pinned[index]);
    impl->look_ahead.push_back(false);
    impl->largest_tensor_bytes = std::max(impl->largest_tensor_bytes, g.layout.tensor_bytes);
  }
  for (const checkpoint::FileInfo& file : checkpoint.files) {
    Impl::File& f = impl->files.emplace_back();
    f.path = file.path;
    f.size = file.size;
    f.fd = open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) return DataLoss(file.path + ": cannot open: " + std::strerror(errno));
    // Filesystems without O_DIRECT (tmpfs) refuse the open: read buffered.
    if (options.direct) f.direct_fd = open(file.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  }
  if (!options.deferred.empty()) impl->look_ahead = planner::LookAheadGroups(options.deferred);
  impl->PlanSlots();
  for (size_t i = 0;
       i < std::max(static_cast<size_t>(options.read_streams), Impl::kSmallReadStreams); ++i) {
    impl->threads.emplace_back([p = impl.get()] { p->ReadLoop(); });
  }
  return std::unique_ptr<LayerLoader>(new LayerLoader(std::move(impl)));
}

StatusOr<LoadedGroup> LayerLoader::Acquire(size_t index) {
  Impl& d = *impl_;
  if (!d.broken.ok()) return d.broken;
  // Deferred groups this pass passes over (their decision is spent).
  for (size_t step = 0; step < d.groups.size() && d.next != index; ++step) {
    Impl::Group& g = d.groups[d.next];
    if (!g.deferred || !g.decision || !g.decision->empty()) break;
    g.decision.reset();
    g.guess.clear();
    d.next = d.After(d.next);
  }
  if (index != d.next || d.held) {
    return FailedPrecondition("layer group " + std::to_string(index) + " acquired out of order");
  }
  if (d.groups[index].skipped) {
    return FailedPrecondition("layer group " + std::to_string(index) + " is skipped");
  }
  if (d.groups[index].deferred && d.groups[index].decision && d.groups[index].decision->empty()) {
    return FailedPrecondition("layer group " + std::to_string(index) + " is passed over this pass");
  }
  d.Request(index);
  if (d.options.prefetch) d.Prefetch(index);

  const Clock::time_point start = Clock::now();
  Impl::Group& g = d.groups[index];
  std::unique_lock<std::mutex> lock(d.mu);
  if (g.state == Impl::State::kIdle)
    return Internal("no buffer free for layer group " + std::to_string(index));
  d.done.wait(lock, [&g] { return g.state == Impl::State::kReady; });
  LoadedGroup out;
  out.wait_seconds = Seconds(Clock::now() - start);
  if (!g.status.ok()) {
    d.broken = g.status;
    return d.broken;
  }
  const bool fresh = g.fresh;
  if (g.fresh) {
    out.bytes_read = g.requested_bytes;
    out.read_began = *g.first_read;
    out.read_ended = g.last_read;
    out.load_seconds = Seconds(out.read_ended - out.read_began);
    out.guessed = g.guessed;
    if (g.deferred) out.units_read = g.read_units;
    g.fresh = false;
  }
  g.decision.reset();  // a deferred group's decision is spent
  g.guess.clear();
  const unsigned char* base = d.slots[static_cast<size_t>(g.slot)].get();
  for (uint64_t dst : g.layout.tensor_dst) out.data.push_back(base + dst);
  out.base = base;
  out.bytes = g.layout.buffer_bytes;
  d.held = index;
  d.next = d.After(index);
  lock.unlock();
  if (fresh) d.DropCachedUpTo(g);  // a pinned group kept from an earlier pass read nothing
  return out;
}

void LayerLoader::Release(size_t index) {
  Impl& d = *impl_;
  if (d.held != index) return;
  d.held.reset();
  Impl::Group& g = d.groups[index];
  if (g.pinned) return;  // kept
  std::lock_guard<std::mutex> lock(d.mu);
  d.FreeSlot(g.slot);
  g.slot = -1;
  g.state = Impl::State::kIdle;
}

Status LayerLoader::SetPinned(std::vector<bool> pinned) {
  Impl& d = *impl_;
  if (pinned.size() != d.groups.size()) return InvalidArgument("pinned needs one flag per group");
  if (d.held) {
    return FailedPrecondition("groups can be pinned only between acquisitions (group " +
                              std::to_string(*d.held) + " is held)");
  }
  std::unique_lock<std::mutex> lock(d.mu);
  d.WaitForReads(lock);
  std::vector<Buffer> old_slots = std::move(d.slots);
  const size_t old_stream_slots = d.stream_slots;
  const size_t old_pinned_slot = d.PinnedSlot(0);
  const uint64_t old_largest = d.largest_buffer;
  for (size_t g = 0; g < d.groups.size(); ++g) d.groups[g].pinned = pinned[g] || d.options.resident;
  d.PlanSlots();
  // The stream buffers keep what they hold when there are as many and they
  // are still large enough (they keep their size).
  const bool keep_stream = d.stream_slots == old_stream_slots && d.largest_buffer <= old_largest;
  if (keep_stream) {
    d.largest_buffer = old_largest;
    for (size_t s = 0; s < d.stream_slots; ++s) d.slots[s] = std::move(old_slots[s]);
  }
  std::vector<bool> stream_busy(d.stream_slots, false);
  for (size_t i = 0; i < d.groups.size(); ++i) {
    Impl::Group& g = d.groups[i];
    if (g.state != Impl::State::kReady) continue;
    const size_t old_slot = static_cast<size_t>(g.slot);
    const size_t own = d.PinnedSlot(i);
    const bool streamed = old_slot < old_pinned_slot;  // a stream or look-ahead buffer
    const bool kept_buffer = keep_stream && old_slot < old_stream_slots;
    if (g.pinned && !streamed) {  // stays pinned, as it is
      d.slots[own] = std::move(old_slots[old_slot]);
      g.slot = static_cast<int>(own);
    } else if (g.guessed) {  // read ahead on a guess, some units only: read again
      g.state = Impl::State::kIdle;
      g.slot = -1;
      g.fresh = false;
      g.guessed = false;
    } else if (g.pinned) {  // newly pinned, read ahead: copied out of its buffer
      const unsigned char* from = kept_buffer ? d.slots[old_slot].get() : old_slots[old_slot].get();
      std::memcpy(d.SlotData(static_cast<int>(own)), from, g.layout.buffer_bytes);
      g.slot = static_cast<int>(own);
    } else if (kept_buffer) {  // read ahead, stays streamed
      stream_busy[old_slot] = true;
    } else {  // no longer pinned, or its buffer is gone: read when acquired
      g.state = Impl::State::kIdle;
      g.slot = -1;
      g.fresh = false;
    }
  }
  d.free_slots.clear();
  for (size_t s = d.stream_slots; s > 0; --s) {
    if (!stream_busy[s - 1]) d.free_slots.push_back(static_cast<int>(s - 1));
  }
  d.DropStaleReadAhead();
  return Status::Ok();
}

void LayerLoader::Skip(size_t index) {
  Impl& d = *impl_;
  if (index >= d.groups.size() || d.held == index) return;
  std::lock_guard<std::mutex> lock(d.mu);
  Impl::Group& g = d.groups[index];
  if (g.skipped || g.state == Impl::State::kReading) return;
  if (g.state == Impl::State::kReady && !g.pinned) {
    d.FreeSlot(g.slot);  // read ahead, never acquired
  }
  if (g.pinned) d.slots[d.PinnedSlot(index)].reset();
  g.slot = -1;
  g.state = Impl::State::kIdle;
  g.skipped = true;
  if (d.next == index) d.next = d.After(index);
}

void LayerLoader::Unskip(size_t index) {
  Impl& d = *impl_;
  if (index >= d.groups.size() || !d.groups[index].skipped) return;
  std::unique_lock<std::mutex> lock(d.mu);
  d.WaitForReads(lock);
  d.groups[index].skipped = false;
  // Between passes: the next Acquire starts one, at the first group not skipped.
  d.next = d.After(d.groups.size() - 1);
  d.DropStaleReadAhead();
}

void LayerLoader::Decide(size_t index, std::vector<bool> units) {
  Impl& d = *impl_;
  if (index >= d.groups.size() || !d.groups[index].deferred) return;
  {
    std::unique_lock<std::mutex> lock(d.mu);
    Impl::Group& g = d.groups[index];
    if (g.guessed && !g.pinned && g.state != Impl::State::kIdle && !g.decision) {
      d.Settle(index, units, lock);
    }
    g.decision = std::move(units);
    g.guess.clear();
  }
  // The prefetch that stopped before this group may go on.
  if (d.options.prefetch && d.held) d.Prefetch(*d.held);
}

void LayerLoader::Guess(size_t index, std::vector<bool> units) {
  Impl& d = *impl_;
  if (index >= d.groups.size() || !d.groups[index].deferred) return;
  std::lock_guard<std::mutex> lock(d.mu);
  d.groups[index].guess = std::move(units);
}

size_t LayerLoader::groups() const { return impl_->groups.size(); }
std::vector<bool> LayerLoader::deferred_groups() const {
  std::vector<bool> out;
  for (const Impl::Group& g : impl_->groups) out.push_back(g.deferred);
  return out;
}
uint64_t LayerLoader::group_tensor_bytes(size_t index) const {
  return impl_->groups.at(index).layout.tensor_bytes;
}
uint64_t LayerLoader::stream_buffer_bytes() const {
  return impl_->largest_buffer * impl_->stream_slots +
         impl_->look_ahead_buffer * impl_->look_ahead_slots;
}
uint64_t LayerLoader::largest_group_bytes() const { return impl_->largest_tensor_bytes; }
uint64_t LayerLoader::buffer_bytes(size_t index) const {
  return impl_->groups.at(index).layout.buffer_bytes;
}

}  // namespace nightshift::engine
