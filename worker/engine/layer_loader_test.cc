#include "worker/engine/layer_loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/test_util.h"

namespace nightshift::engine {
namespace {

using checkpoint::testing::CopyFixture;
using checkpoint::testing::FixtureDir;
using checkpoint::testing::ReadFileBytes;
using checkpoint::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kFixture[] = "llama-gqa-sharded";  // two files, two layers

checkpoint::Checkpoint ReadOrDie(const std::string& dir) {
  StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::ReadCheckpoint(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  return ckpt.ok() ? std::move(ckpt).value() : checkpoint::Checkpoint();
}

TensorList Tensors(const checkpoint::Checkpoint& ckpt, const checkpoint::TensorGroup& group) {
  TensorList out;
  for (int i : group.tensors) out.push_back(&ckpt.tensors[static_cast<size_t>(i)]);
  return out;
}

// Every layer, then the head: what the engine streams.
std::vector<TensorList> Groups(const checkpoint::Checkpoint& ckpt) {
  std::vector<TensorList> groups;
  for (const checkpoint::TensorGroup& layer : ckpt.layers) groups.push_back(Tensors(ckpt, layer));
  groups.push_back(Tensors(ckpt, ckpt.head));
  return groups;
}

uint64_t Bytes(const TensorList& list) {
  uint64_t bytes = 0;
  for (const checkpoint::TensorInfo* t : list) bytes += t->size;
  return bytes;
}

struct Case {
  const char* name;
  LayerLoaderOptions options;
};

class LayerLoaderModes : public ::testing::TestWithParam<Case> {};

// Small chunks and several streams, so a tensor arrives in many pieces read
// by different threads.
LayerLoaderOptions Small(bool resident, bool prefetch, int streams, bool direct = true) {
  LayerLoaderOptions o;
  o.direct = direct;
  o.resident = resident;
  o.prefetch = prefetch;
  o.read_streams = streams;
  o.chunk_bytes = 1000;
  return o;
}

// Groups 0..2 pinned as `pinned` says (partial residency).
LayerLoaderOptions Pinned(std::vector<bool> pinned, bool prefetch, int streams) {
  LayerLoaderOptions o = Small(false, prefetch, streams, false);
  o.pinned = std::move(pinned);
  return o;
}

bool IsPinned(const LayerLoaderOptions& o, size_t g) {
  return o.resident || (!o.pinned.empty() && o.pinned[g]);
}

INSTANTIATE_TEST_SUITE_P(
    All, LayerLoaderModes,
    ::testing::Values(Case{"StreamPrefetch", Small(false, true, 3)},
                      Case{"StreamSync", Small(false, false, 2)},
                      Case{"StreamOneReader", Small(false, true, 1)},
                      Case{"StreamBuffered", Small(false, true, 3, false)},
                      Case{"ResidentBuffered", Small(true, false, 2, false)},
                      Case{"Resident", Small(true, true, 4)},
                      Case{"PinnedMiddle", Pinned({false, true, false}, true, 3)},
                      Case{"PinnedEnds", Pinned({true, false, true}, true, 2)},
                      Case{"PinnedSync", Pinned({true, false, false}, false, 2)}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST_P(LayerLoaderModes, DeliversTheFilesBytesPassAfterPass) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  std::vector<std::string> files;
  for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
  const std::vector<TensorList> groups = Groups(ckpt);
  ASSERT_EQ(groups.size(), 3u);

  StatusOr<std::unique_ptr<LayerLoader>> loader =
      LayerLoader::Open(ckpt, groups, GetParam().options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ((*loader)->groups(), 3u);
  // The groups are read in the order acquired, one at a time: a group's
  // first read starts after the last read of the group read before it.
  std::chrono::steady_clock::time_point last_read_ended;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t g = 0; g < groups.size(); ++g) {
      StatusOr<LoadedGroup> loaded = (*loader)->Acquire(g);
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      ASSERT_EQ(loaded->data.size(), groups[g].size());
      for (size_t t = 0; t < groups[g].size(); ++t) {
        const checkpoint::TensorInfo& info = *groups[g][t];
        const std::string& file = files[static_cast<size_t>(info.file)];
        ASSERT_EQ(std::memcmp(loaded->data[t], file.data() + info.offset, info.size), 0)
            << info.name << " pass " << pass;
        // Tensors keep the alignment they have in the file.
        EXPECT_EQ(reinterpret_cast<uintptr_t>(loaded->data[t]) % 64, info.offset % 64);
        // ... and lie in the range a copy of the group takes.
        EXPECT_GE(loaded->data[t], loaded->base);
        EXPECT_LE(loaded->data[t] + info.size, loaded->base + loaded->bytes) << info.name;
      }
      const bool reads = !IsPinned(GetParam().options, g) || pass == 0;
      EXPECT_EQ(loaded->bytes_read, reads ? Bytes(groups[g]) : 0u) << g << " pass " << pass;
      if (reads) {
        EXPECT_GT(loaded->load_seconds, 0);
        EXPECT_GE(loaded->read_began, last_read_ended) << g << " pass " << pass;
        EXPECT_GE(loaded->read_ended, loaded->read_began);
        last_read_ended = loaded->read_ended;
      }
      EXPECT_GE(loaded->wait_seconds, 0);
      (*loader)->Release(g);
    }
  }
}

TEST(LayerLoaderTest, PinnedGroupsAreReadOnceAndTheRestEveryPass) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  const std::vector<TensorList> groups = Groups(ckpt);
  StatusOr<std::unique_ptr<LayerLoader>> loader =
      LayerLoader::Open(ckpt, groups, Small(false, true, 2, false));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ((*loader)->stream_buffer_bytes(),
            2 * std::max({(*loader)->buffer_bytes(0), (*loader)->buffer_bytes(1),
                          (*loader)->buffer_bytes(2)}));
  EXPECT_FALSE((*loader)->SetPinned({true}).ok());  // one flag per group
  ASSERT_TRUE((*loader)->SetPinned({true, false, true}).ok());
  EXPECT_EQ((*loader)->stream_buffer_bytes(), 2 * (*loader)->buffer_bytes(1));
  uint64_t read[3] = {0, 0, 0};
  for (int pass = 0; pass < 3; ++pass) {
    uint64_t pass_bytes = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      StatusOr<LoadedGroup> loaded = (*loader)->Acquire(g);
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      pass_bytes += loaded->bytes_read;
      if (pass == 0) read[g] = loaded->bytes_read;
      (*loader)->Release(g);
    }
    const uint64_t expected = pass == 0 ? read[0] + read[1] + read[2] : read[1];
    EXPECT_EQ(pass_bytes, expected) << "pass " << pass;
  }
  EXPECT_EQ(read[1], (*loader)->group_tensor_bytes(1));
  // Not while a group is held.
  ASSERT_TRUE((*loader)->Acquire(0).ok());
  EXPECT_EQ((*loader)->SetPinned({false, false, false}).code(), StatusCode::kFailedPrecondition);
  (*loader)->Release(0);
}

// The bytes each group's acquisition read over `passes` passes, checking
// every group's data against the files.
std::vector<std::vector<uint64_t>> RunPasses(LayerLoader& loader,
                                             const std::vector<TensorList>& groups,
                                             const std::vector<std::string>& files, int passes,
                                             size_t from = 0) {
  std::vector<std::vector<uint64_t>> read;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<uint64_t>& bytes = read.emplace_back();
    for (size_t g = from; g < groups.size(); ++g) {
      StatusOr<LoadedGroup> loaded = loader.Acquire(g);
      EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
      if (!loaded.ok()) return read;
      for (size_t t = 0; t < groups[g].size(); ++t) {
        const checkpoint::TensorInfo& info = *groups[g][t];
        EXPECT_EQ(
            std::memcmp(loaded->data[t], files[static_cast<size_t>(info.file)].data() + info.offset,
                        info.size),
            0)
            << info.name << " pass " << pass;
      }
      bytes.push_back(loaded->bytes_read);
      loader.Release(g);
    }
    from = 0;
  }
  return read;
}

// Pins change between passes (the engine's adaptive split): a group no
// longer pinned is read again, a newly pinned one is read once more and
// then kept, and the data is right throughout, with and without prefetch
// (whose read-ahead of the next pass's first groups must give way).
TEST(LayerLoaderTest, PinsChangeBetweenPasses) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  std::vector<std::string> files;
  for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
  const std::vector<TensorList> groups = Groups(ckpt);
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch" : "no prefetch");
    StatusOr<std::unique_ptr<LayerLoader>> loader =
        LayerLoader::Open(ckpt, groups, Pinned({true, false, true}, prefetch, 2));
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    const uint64_t b0 = Bytes(groups[0]), b1 = Bytes(groups[1]), b2 = Bytes(groups[2]);
    using Reads = std::vector<uint64_t>;
    std::vector<std::vector<uint64_t>> read = RunPasses(**loader, groups, files, 2);
    EXPECT_EQ(read[0], (Reads{b0, b1, b2}));
    EXPECT_EQ(read[1], (Reads{0, b1, 0}));
    // Group 0 streamed from now on, group 1 kept from its next read.
    ASSERT_TRUE((*loader)->SetPinned({false, true, true}).ok());
    // Stream buffers kept (group 0's fits group 1's old one) or sized anew.
    EXPECT_EQ(
        (*loader)->stream_buffer_bytes(),
        (prefetch ? 2u : 1u) * std::max((*loader)->buffer_bytes(0), (*loader)->buffer_bytes(1)));
    read = RunPasses(**loader, groups, files, 3);
    EXPECT_EQ(read[0], (Reads{b0, b1, 0}));
    EXPECT_EQ(read[1], (Reads{b0, 0, 0}));
    EXPECT_EQ(read[2], (Reads{b0, 0, 0}));
    // Everything pinned: no stream buffers; group 0 kept from its next read.
    ASSERT_TRUE((*loader)->SetPinned({true, true, true}).ok());
    EXPECT_EQ((*loader)->stream_buffer_bytes(), 0u);
    read = RunPasses(**loader, groups, files, 2);
    EXPECT_EQ(read[0], (Reads{b0, 0, 0}));
    EXPECT_EQ(read[1], (Reads{0, 0, 0}));
    // Nothing pinned: every group streamed again.
    ASSERT_TRUE((*loader)->SetPinned({false, false, false}).ok());
    read = RunPasses(**loader, groups, files, 2);
    EXPECT_EQ(read[0], (Reads{b0, b1, b2}));
    EXPECT_EQ(read[1], (Reads{b0, b1, b2}));
    // Mid-pass, between two groups, the order goes on where it was.
    ASSERT_TRUE((*loader)->Acquire(0).ok());
    (*loader)->Release(0);
    ASSERT_TRUE((*loader)->SetPinned({false, false, true}).ok());
    read = RunPasses(**loader, groups, files, 2, /*from=*/1);
    EXPECT_EQ(read[0], (Reads{b1, b2}));
    EXPECT_EQ(read[1], (Reads{b0, b1, 0}));
  }
}

TEST(LayerLoaderTest, SkippedGroupsAreNeitherReadNorExpected) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  const std::vector<TensorList> groups = Groups(ckpt);
  StatusOr<std::unique_ptr<LayerLoader>> loader =
      LayerLoader::Open(ckpt, groups, Small(false, true, 2, false));
  ASSERT_TRUE(loader.ok());
  for (size_t g = 0; g < groups.size(); ++g) {
    ASSERT_TRUE((*loader)->Acquire(g).ok());
    (*loader)->Release(g);
    if (g == 1) (*loader)->Skip(1);  // the caller keeps group 1 (on a device)
  }
  for (int pass = 0; pass < 2; ++pass) {
    StatusOr<LoadedGroup> first = (*loader)->Acquire(0);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_GT(first->bytes_read, 0u);
    (*loader)->Release(0);
    EXPECT_EQ((*loader)->Acquire(1).status().code(), StatusCode::kFailedPrecondition);
    StatusOr<LoadedGroup> last = (*loader)->Acquire(2);
    ASSERT_TRUE(last.ok()) << last.status().ToString();
    EXPECT_GT(last->bytes_read, 0u);
    (*loader)->Release(2);
  }
  // Given back (the device no longer keeps it): read again in its place.
  (*loader)->Unskip(1);
  for (size_t g = 0; g < groups.size(); ++g) {
    StatusOr<LoadedGroup> loaded = (*loader)->Acquire(g);
    ASSERT_TRUE(loaded.ok()) << g << ": " << loaded.status().ToString();
    EXPECT_EQ(loaded->bytes_read, Bytes(groups[g]));
    (*loader)->Release(g);
  }
}

// Groups(ckpt) of a two-layer checkpoint, group 1 (layer 1, `tensors`
// tensors) deferred, each of its tensors a unit of its own; small reads.
LayerLoaderOptions DeferredLayer1(size_t tensors) {
  LayerLoaderOptions options = Small(false, true, 2, false);
  options.deferred = {false, true, false};
  options.units.assign(3, {});
  for (size_t t = 0; t < tensors; ++t) options.units[1].push_back(static_cast<int>(t));
  return options;
}

// Deferred groups (an MoE layer's expert slices): each pass decides which
// units (experts) of the group it reads: a subset reads only those units'
// tensors, byte for byte; none passes over the group (Acquire goes around
// it); a pinned deferred group is read whole once. Here group 1 (layer 1)
// is deferred, each of its tensors a unit of its own.
TEST(LayerLoaderTest, DeferredGroupsReadTheUnitsEachPassDecides) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  std::vector<std::string> files;
  for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
  const std::vector<TensorList> groups = Groups(ckpt);
  const size_t tensors = groups[1].size();
  ASSERT_GE(tensors, 3u);
  for (bool pinned : {false, true}) {
    SCOPED_TRACE(pinned ? "pinned" : "streamed");
    LayerLoaderOptions options = DeferredLayer1(tensors);
    if (pinned) options.pinned = {false, true, false};
    StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, options);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    // Pass 1 reads units 0 and 2 of group 1, pass 2 none, pass 3 unit 1.
    const std::vector<std::vector<bool>> decisions = {{true, false, true}, {}, {false, true}};
    bool read_whole = false;
    for (const std::vector<bool>& units : decisions) {
      ASSERT_TRUE((*loader)->Acquire(0).ok());
      (*loader)->Decide(1, units);  // while group 0 is held, as the engine does
      (*loader)->Release(0);
      if (!units.empty()) {
        StatusOr<LoadedGroup> loaded = (*loader)->Acquire(1);
        ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
        uint64_t expected = 0;
        for (size_t t = 0; t < tensors; ++t) {
          const bool wanted = pinned || (t < units.size() && units[t]);
          const checkpoint::TensorInfo& info = *groups[1][t];
          if (wanted) expected += info.size;
          if (!wanted && !(pinned && read_whole)) continue;
          const std::string& file = files[static_cast<size_t>(info.file)];
          EXPECT_EQ(std::memcmp(loaded->data[t], file.data() + info.offset, info.size), 0)
              << info.name;
        }
        EXPECT_EQ(loaded->bytes_read, pinned && read_whole ? 0u : expected);
        read_whole |= pinned;
        (*loader)->Release(1);
      } else {
        EXPECT_EQ((*loader)->Acquire(1).status().code(), StatusCode::kFailedPrecondition);
      }
      StatusOr<LoadedGroup> head = (*loader)->Acquire(2);
      ASSERT_TRUE(head.ok()) << head.status().ToString();
      EXPECT_EQ(head->bytes_read, Bytes(groups[2]));
      (*loader)->Release(2);
    }
  }
}

// A guess at a deferred group's decision (Guess) is read once the prefetch
// reaches the group with a stream buffer free, before the decision; the
// decision then reads the units it asks for that were not guessed and takes
// back the guessed reads not started, and a group passed over gives its
// buffer back. Whatever was guessed and whenever the decision comes (at once,
// or once the guess is read), the units asked for arrive byte for byte, and
// bytes_read counts what was read: the asked units, and guessed ones read for
// nothing (in units_read, not asked for). Group 1 is deferred, each tensor a
// unit.
TEST(LayerLoaderTest, AGuessIsReadAheadOfTheDecisionAndSettledByIt) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  std::vector<std::string> files;
  for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
  const std::vector<TensorList> groups = Groups(ckpt);
  const size_t tensors = groups[1].size();
  ASSERT_GE(tensors, 4u);
  auto unit_bytes = [&](size_t t) { return groups[1][t]->size; };
  struct Step {
    std::vector<bool> guess;
    std::vector<bool> decision;
  };
  const std::vector<Step> steps = {
      {{true, false, true}, {true, false, true}},  // guessed right
      {{false, false, true, true}, {true, true}},  // guessed wrong: 0 and 1 read after
      {{true, true}, {true, true, false, true}},   // half right
      {{true, true, true}, {}},                    // the pass passes over the group
      {{}, {false, false, true}},                  // no guess
      {{false, false}, {true}},                    // a guess of nothing
  };
  for (bool wait : {true, false}) {
    SCOPED_TRACE(wait ? "decided once the guess is read" : "decided at once");
    LayerLoaderOptions options = DeferredLayer1(tensors);
    StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, options);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    for (const Step& step : steps) {
      const bool any_guess =
          std::find(step.guess.begin(), step.guess.end(), true) != step.guess.end();
      SCOPED_TRACE("step " + std::to_string(&step - steps.data()));
      (*loader)->Guess(1, step.guess);
      ASSERT_TRUE((*loader)->Acquire(0).ok());  // its prefetch reads the guess
      if (wait) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const auto decided = std::chrono::steady_clock::now();
      (*loader)->Decide(1, step.decision);
      (*loader)->Release(0);
      if (step.decision.empty()) {
        EXPECT_EQ((*loader)->Acquire(1).status().code(), StatusCode::kFailedPrecondition);
      } else {
        StatusOr<LoadedGroup> loaded = (*loader)->Acquire(1);
        ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
        uint64_t asked = 0, guessed_unasked = 0, read_unasked = 0;
        for (size_t t = 0; t < tensors; ++t) {
          const bool ask = t < step.decision.size() && step.decision[t];
          const bool guessed = t < step.guess.size() && step.guess[t];
          const bool read = t < loaded->units_read.size() && loaded->units_read[t];
          EXPECT_EQ(read, ask || (guessed && (wait || read))) << t;
          if (!ask) {
            if (guessed) guessed_unasked += unit_bytes(t);
            if (read) read_unasked += unit_bytes(t);
            continue;
          }
          asked += unit_bytes(t);
          const checkpoint::TensorInfo& info = *groups[1][t];
          const std::string& file = files[static_cast<size_t>(info.file)];
          EXPECT_EQ(std::memcmp(loaded->data[t], file.data() + info.offset, info.size), 0)
              << info.name;
        }
        EXPECT_EQ(loaded->guessed, any_guess);
        if (wait) {  // every guessed unit was read before the decision
          EXPECT_EQ(loaded->bytes_read, asked + guessed_unasked);
          EXPECT_EQ(read_unasked, guessed_unasked);
          if (any_guess) {
            EXPECT_LT(loaded->read_began, decided);
          }
        } else {  // some guessed reads (of a unit, or part of one) were taken back
          EXPECT_GE(loaded->bytes_read, asked);
          EXPECT_LE(loaded->bytes_read, asked + read_unasked);
        }
        (*loader)->Release(1);
      }
      StatusOr<LoadedGroup> head = (*loader)->Acquire(2);  // a buffer is free for it
      ASSERT_TRUE(head.ok()) << head.status().ToString();
      EXPECT_EQ(head->bytes_read, Bytes(groups[2]));
      (*loader)->Release(2);
    }
  }
}

// A group read ahead on a guess holds only the guessed units: pinned before
// it is acquired, it is read again whole, not kept as it is.
TEST(LayerLoaderTest, AGroupReadOnAGuessAndThenPinnedIsReadWhole) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  std::vector<std::string> files;
  for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
  const std::vector<TensorList> groups = Groups(ckpt);
  const size_t tensors = groups[1].size();
  ASSERT_GE(tensors, 2u);
  StatusOr<std::unique_ptr<LayerLoader>> loader =
      LayerLoader::Open(ckpt, groups, DeferredLayer1(tensors));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  (*loader)->Guess(1, {true});
  ASSERT_TRUE((*loader)->Acquire(0).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the guess is read
  (*loader)->Release(0);
  ASSERT_TRUE((*loader)->SetPinned({false, true, false}).ok());
  (*loader)->Decide(1, {false, true});
  StatusOr<LoadedGroup> loaded = (*loader)->Acquire(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->bytes_read, Bytes(groups[1]));
  for (size_t t = 0; t < tensors; ++t) {
    const checkpoint::TensorInfo& info = *groups[1][t];
    const std::string& file = files[static_cast<size_t>(info.file)];
    EXPECT_EQ(std::memcmp(loaded->data[t], file.data() + info.offset, info.size), 0) << info.name;
  }
}

// A sparse layer's dense part after another sparse layer is read while the
// expert slices before it wait for their routing (planner::LookAheadGroups),
// into two look-ahead buffers of its own: the disk reads the next layer's
// attention while this one's routes. Here each layer is split in two: its
// first tensors a dense part, the rest a deferred slice of one unit.
TEST(LayerLoaderTest, TheNextDensePartIsReadWhileASliceWaitsForItsRouting) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  std::vector<std::string> files;
  for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
  std::vector<TensorList> groups;
  for (const checkpoint::TensorGroup& layer : ckpt.layers) {
    const TensorList all = Tensors(ckpt, layer);
    ASSERT_GE(all.size(), 4u);
    groups.emplace_back(all.begin(), all.begin() + 2);
    groups.emplace_back(all.begin() + 2, all.end());
  }
  groups.push_back(Tensors(ckpt, ckpt.head));
  ASSERT_EQ(groups.size(), 5u);  // dense, slice, dense, slice, head
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch" : "no prefetch");
    LayerLoaderOptions options = Small(false, prefetch, 2, false);
    options.deferred = {false, true, false, true, false};
    StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, options);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    uint64_t largest = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      largest = std::max(largest, (*loader)->buffer_bytes(g));
    }
    EXPECT_EQ((*loader)->stream_buffer_bytes(),
              prefetch ? 2 * largest + 2 * (*loader)->buffer_bytes(2) : largest);
    for (int pass = 0; pass < 2; ++pass) {
      SCOPED_TRACE("pass " + std::to_string(pass));
      std::vector<std::chrono::steady_clock::time_point> decided(groups.size());
      std::vector<LoadedGroup> seen(groups.size());
      for (size_t g = 0; g < groups.size(); ++g) {
        StatusOr<LoadedGroup> loaded = (*loader)->Acquire(g);
        ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
        for (size_t t = 0; t < groups[g].size(); ++t) {
          const checkpoint::TensorInfo& info = *groups[g][t];
          const std::string& file = files[static_cast<size_t>(info.file)];
          ASSERT_EQ(std::memcmp(loaded->data[t], file.data() + info.offset, info.size), 0)
              << info.name;
        }
        EXPECT_EQ(loaded->bytes_read, Bytes(groups[g]));
        seen[g] = *loaded;
        if (g == 0 || g == 2) {  // a dense part: its layer routes, then its slice is decided
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          decided[g + 1] = std::chrono::steady_clock::now();
          (*loader)->Decide(g + 1, {true});
        }
        (*loader)->Release(g);
      }
      // The second dense part began reading before the first slice was
      // decided with prefetch; without, only once acquired.
      EXPECT_EQ(seen[2].read_began < decided[1], prefetch);
      EXPECT_GE(seen[1].read_began, decided[1]);
      EXPECT_GE(seen[3].read_began, decided[3]);
    }
  }
}

// A quantized projection's parts each sit in a region of their own
// (QuantizedTensor::part_offsets) though they lie side by side in the file:
// the loader reads them, and the tensors around them, as one run (a page two
// parts share through a bounce page). Every part and tensor arrives byte for
// byte, whatever the read size, O_DIRECT or not.
TEST(LayerLoaderTest, QuantizedPartsReadTogetherLandInTheirRegions) {
  for (const char* fixture : {"awq-int4", "gptq-int4", "ct-fp8-channel", "fp8-block"}) {
    checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(fixture));
    std::vector<std::string> files;
    for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
    const std::vector<TensorList> groups = Groups(ckpt);
    for (uint64_t chunk : {uint64_t{4096}, uint64_t{20000}, kDefaultReadChunkBytes}) {
      for (bool direct : {true, false}) {
        SCOPED_TRACE(std::string(fixture) + ", chunk " + std::to_string(chunk) +
                     (direct ? ", O_DIRECT" : ", buffered"));
        LayerLoaderOptions options = Small(false, true, 1, direct);
        options.chunk_bytes = chunk;
        StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, options);
        ASSERT_TRUE(loader.ok()) << loader.status().ToString();
        int quantized = 0;
        for (size_t g = 0; g < groups.size(); ++g) {
          StatusOr<LoadedGroup> loaded = (*loader)->Acquire(g);
          ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
          for (size_t t = 0; t < groups[g].size(); ++t) {
            const checkpoint::TensorInfo& info = *groups[g][t];
            if (info.quant == nullptr) {
              const std::string& file = files[static_cast<size_t>(info.file)];
              ASSERT_EQ(std::memcmp(loaded->data[t], file.data() + info.offset, info.size), 0)
                  << info.name;
              continue;
            }
            ++quantized;
            const checkpoint::QuantizedTensor& q = *info.quant;
            for (size_t k = 0; k < q.parts.size(); ++k) {
              const checkpoint::TensorInfo& part = q.parts[k];
              const std::string& file = files[static_cast<size_t>(part.file)];
              ASSERT_EQ(std::memcmp(loaded->data[t] + q.part_offsets[k], file.data() + part.offset,
                                    part.size),
                        0)
                  << info.name << " part " << k;
            }
          }
          (*loader)->Release(g);
        }
        EXPECT_GT(quantized, 0);
      }
    }
  }
}

TEST(LayerLoaderTest, LargestGroupIsTheLargestTensorBytes) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  const std::vector<TensorList> groups = Groups(ckpt);
  StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, {});
  ASSERT_TRUE(loader.ok());
  uint64_t largest = 0;
  for (const TensorList& g : groups) largest = std::max(largest, Bytes(g));
  EXPECT_EQ((*loader)->largest_group_bytes(), largest);
}

TEST(LayerLoaderTest, BuffersComeFromTheGivenAllocator) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  std::vector<std::string> files;
  for (const checkpoint::FileInfo& f : ckpt.files) files.push_back(ReadFileBytes(f.path));
  const std::vector<TensorList> groups = Groups(ckpt);
  std::vector<std::pair<unsigned char*, uint64_t>> allocated;
  int freed = 0;
  LayerLoaderOptions options;
  options.allocate = [&](uint64_t bytes) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    allocated.emplace_back(static_cast<unsigned char*>(p), bytes);
    return std::shared_ptr<unsigned char>(static_cast<unsigned char*>(p), [&](unsigned char* q) {
      std::free(q);
      ++freed;
    });
  };
  {
    StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, options);
    ASSERT_TRUE(loader.ok());
    for (size_t g = 0; g < groups.size(); ++g) {
      StatusOr<LoadedGroup> loaded = (*loader)->Acquire(g);
      ASSERT_TRUE(loaded.ok());
      auto owner = std::find_if(allocated.begin(), allocated.end(), [&](const auto& a) {
        return loaded->base >= a.first && loaded->base + loaded->bytes <= a.first + a.second;
      });
      EXPECT_NE(owner, allocated.end()) << "group " << g << " is not in an allocated buffer";
      const checkpoint::TensorInfo& info = *groups[g][0];
      EXPECT_EQ(std::memcmp(loaded->data[0],
                            files[static_cast<size_t>(info.file)].data() + info.offset, info.size),
                0);
      (*loader)->Release(g);
    }
    EXPECT_EQ(allocated.size(), 2u);  // streaming with prefetch: two buffers, reused
  }
  EXPECT_EQ(freed, 2);

  options.allocate = [](uint64_t bytes) {  // misaligned memory is refused, not read into
    static std::vector<unsigned char> storage;
    storage.resize(bytes + 4097);
    unsigned char* p = storage.data();
    while (reinterpret_cast<uintptr_t>(p) % 4096 != 1) ++p;
    return std::shared_ptr<unsigned char>(p, [](unsigned char*) {});
  };
  StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, options);
  ASSERT_TRUE(loader.ok());
  EXPECT_THROW((void)(*loader)->Acquire(0), std::invalid_argument);
}

TEST(LayerLoaderTest, GroupsAreAcquiredInOrderOneAtATime) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, Groups(ckpt), {});
  ASSERT_TRUE(loader.ok());
  LayerLoader& l = **loader;
  EXPECT_EQ(l.Acquire(1).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(l.Acquire(0).ok());
  EXPECT_EQ(l.Acquire(1).status().code(), StatusCode::kFailedPrecondition);  // 0 still held
  l.Release(2);                                                              // not held: ignored
  l.Release(0);
  ASSERT_TRUE(l.Acquire(1).ok());
  l.Release(1);
  ASSERT_TRUE(l.Acquire(2).ok());
  l.Release(2);
  EXPECT_TRUE(l.Acquire(0).ok());  // wraps to the next pass
}

TEST(LayerLoaderTest, BadOptionsAreRefused) {
  checkpoint::Checkpoint ckpt = ReadOrDie(FixtureDir(kFixture));
  LayerLoaderOptions o;
  o.read_streams = 0;
  EXPECT_THAT(LayerLoader::Open(ckpt, Groups(ckpt), o).status().message(),
              HasSubstr("read_streams"));
  o = {};
  o.chunk_bytes = 0;
  EXPECT_EQ(LayerLoader::Open(ckpt, Groups(ckpt), o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerLoader::Open(ckpt, {}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerLoader::Open(ckpt, {TensorList()}, {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(LayerLoaderTest, AShortFileIsDataLossNamingItAndTheLoaderStaysFailed) {
  TempDir tmp;
  const std::string dir = tmp.file("model");
  CopyFixture(kFixture, dir);
  checkpoint::Checkpoint ckpt = ReadOrDie(dir);
  StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, Groups(ckpt), {});
  ASSERT_TRUE(loader.ok());
  for (const checkpoint::FileInfo& f : ckpt.files) {
    ASSERT_EQ(truncate(f.path.c_str(), static_cast<off_t>(f.data_offset)), 0);
  }
  StatusOr<LoadedGroup> loaded = (*loader)->Acquire(0);
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(), HasSubstr(dir));
  EXPECT_THAT(loaded.status().message(), HasSubstr("file ends before offset"));
  EXPECT_EQ((*loader)->Acquire(0).status().code(), StatusCode::kDataLoss);
}

// Share of the file's data pages in the page cache.
double CachedFraction(const checkpoint::FileInfo& file) {
  int fd = open(file.path.c_str(), O_RDONLY);
  void* map = mmap(nullptr, file.size, PROT_READ, MAP_SHARED, fd, 0);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((file.size + page - 1) / page);
  mincore(map, file.size, resident.data());
  munmap(map, file.size);
  close(fd);
  // The header's pages were read by ReadCheckpoint; count the data's.
  const size_t first = (file.data_offset + page - 1) / page;
  size_t cached = 0;
  for (size_t i = first; i < resident.size(); ++i) cached += resident[i] & 1;
  return static_cast<double>(cached) / static_cast<double>(resident.size() - first);
}

class LayerLoaderPageCache : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(DirectAndBuffered, LayerLoaderPageCache, ::testing::Bool());

TEST_P(LayerLoaderPageCache, ThePageCacheDoesNotKeepWhatWasRead) {
  TempDir tmp;
  const std::string dir = tmp.file("model");
  CopyFixture(kFixture, dir);
  checkpoint::Checkpoint ckpt = ReadOrDie(dir);
  for (const checkpoint::FileInfo& f : ckpt.files) {
    int fd = open(f.path.c_str(), O_RDONLY);
    fdatasync(fd);  // dirty pages cannot be dropped
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  const std::vector<TensorList> groups = Groups(ckpt);
  LayerLoaderOptions options;
  options.direct = GetParam();
  StatusOr<std::unique_ptr<LayerLoader>> loader = LayerLoader::Open(ckpt, groups, options);
  ASSERT_TRUE(loader.ok());
  for (size_t g = 0; g < groups.size(); ++g) {
    ASSERT_TRUE((*loader)->Acquire(g).ok());
    (*loader)->Release(g);
  }
  // The prefetch of the next pass's first group may still be in flight.
  loader->reset();
  for (const checkpoint::FileInfo& f : ckpt.files) {
    // Pages shared with the header or between spans may stay; almost nothing else.
    EXPECT_LT(CachedFraction(f), 0.1) << f.path;
  }
}

}  // namespace
}  // namespace nightshift::engine
