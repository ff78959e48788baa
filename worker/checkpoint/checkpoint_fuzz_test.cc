// Fuzzing the header parser and the whole reader with random and mutated
// inputs. Deterministic (fixed seeds); meant to run under ASan/UBSan too. A
// run passes when nothing crashes and every accepted input satisfies the
// reader's guarantees (spans inside the data, sizes = shape x dtype, no
// overlaps, groups partition the tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/test_util.h"

namespace nightshift::checkpoint {
namespace {

using testing::FixtureDir;
using testing::FixtureNames;
using testing::ReadFileBytes;
using testing::SplitSafetensors;
using testing::TempDir;

constexpr int kHeaderRounds = 8000;
constexpr int kFileRounds = 600;

struct Seed {
  std::string header;
  uint64_t data_size;
};

std::vector<Seed> FixtureSeeds() {
  std::vector<Seed> seeds;
  for (const std::string& name : FixtureNames()) {
    for (const auto& entry : std::filesystem::directory_iterator(FixtureDir(name))) {
      if (entry.path().extension() != ".safetensors") continue;
      const auto split = SplitSafetensors(ReadFileBytes(entry.path().string()));
      seeds.push_back({split.header, split.data_size});
    }
  }
  return seeds;
}

// Mutations of JSON header text that aim at each validation rule.
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t Below(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  bool OneIn(size_t n) { return Below(n) == 0; }

  std::string Mutate(std::string text) {
    const int steps = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < steps; ++i) MutateOnce(text);
    return text;
  }

  std::string RandomBytes(size_t max_len) {
    std::string s(Below(max_len + 1), '\0');
    const std::string alphabet = "{}[]\":,0123456789-.eE \tFBUI_abcdefghijklmnopqrstuvwxyz\\";
    for (char& c : s)
      c = OneIn(4) ? static_cast<char>(Below(256)) : alphabet[Below(alphabet.size())];
    return s;
  }

  uint64_t DataSize(uint64_t real) {
    switch (Below(5)) {
      case 0:
        return 0;
      case 1:
        return real - std::min<uint64_t>(real, Below(64));
      case 2:
        return real + Below(64);
      case 3:
        return rng_();
      default:
        return real;
    }
  }

 private:
  void MutateOnce(std::string& text) {
    if (text.empty()) {
      text = RandomBytes(16);
      return;
    }
    switch (Below(10)) {
      case 0:  // flip a byte
        text[Below(text.size())] ^= static_cast<char>(1 + Below(255));
        break;
      case 1:  // truncate
        text.resize(Below(text.size()));
        break;
      case 2:  // replace a number with a nasty one
        ReplaceNumber(text);
        break;
      case 3:  // swap a dtype name
        ReplaceDType(text);
        break;
      case 4:  // nesting junk
        text.insert(Below(text.size()), Nesting());
        break;
      case 5:  // duplicate a slice elsewhere (repeated keys, overlapping spans)
      {
        const size_t from = Below(text.size());
        const size_t len = Below(std::min<size_t>(200, text.size() - from) + 1);
        text.insert(Below(text.size()), text.substr(from, len));
      } break;
      case 6:  // delete a slice
      {
        const size_t from = Below(text.size());
        text.erase(from, Below(text.size() - from + 1));
      } break;
      case 7:  // random bytes
        text.insert(Below(text.size()), RandomBytes(12));
        break;
      case 8:  // a valid document that is not an object
        text = "[" + text + "]";
        break;
      default:  // grow a shape: append a dimension
      {
        const size_t at = text.find("\"shape\":[", Below(text.size()));
        if (at != std::string::npos) text.insert(at + 9, NastyNumber() + ",");
      } break;
    }
  }

  std::string NastyNumber() {
    static const char* const kNumbers[] = {"0",
                                           "1",
                                           "-1",
                                           "2147483648",
                                           "4294967296",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "99999999999999999999999",
                                           "1e300",
                                           "-0",
                                           "0.5",
                                           "1e-5",
                                           "4611686018427387904",
                                           "3037000500",
                                           "null",
                                           "true",
                                           "\"7\""};
    if (OneIn(3)) return std::to_string(Below(1u << 20));
    return kNumbers[Below(sizeof(kNumbers) / sizeof(kNumbers[0]))];
  }

  void ReplaceNumber(std::string& text) {
    size_t at = Below(text.size());
    while (at < text.size() && !(text[at] >= '0' && text[at] <= '9')) ++at;
    if (at == text.size()) return;
    size_t end = at;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    text.replace(at, end - at, NastyNumber());
  }

  void ReplaceDType(std::string& text) {
    static const char* const kNames[] = {"F32",  "F16",     "BF16",        "F64", "I8", "U8",
                                         "BOOL", "F8_E4M3", "F8_E5M2",     "I64", "F4", "Q4_0",
                                         "",     "f32",     "BF16\\u0000", "C64"};
    const size_t at = text.find("\"dtype\":\"", Below(text.size()));
    if (at == std::string::npos) return;
    const size_t start = at + 9;
    const size_t end = text.find('"', start);
    if (end == std::string::npos) return;
    text.replace(start, end - start, kNames[Below(sizeof(kNames) / sizeof(kNames[0]))]);
  }

  std::string Nesting() {
    const size_t depth = OneIn(100) ? 100000 : Below(64);
    const bool object = OneIn(2);
    std::string s;
    for (size_t i = 0; i < depth; ++i) s += object ? "{\"a\":" : "[";
    if (OneIn(2)) {  // sometimes closed, sometimes not
      s += "0";
      for (size_t i = 0; i < depth; ++i) s += object ? "}" : "]";
    }
    return s;
  }

  std::mt19937_64 rng_;
};

// The guarantees of a successful parse.
void ExpectValidLayout(const std::vector<TensorInfo>& tensors, uint64_t data_size) {
  uint64_t reach = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    ASSERT_LE(t.offset, data_size);
    ASSERT_LE(t.size, data_size - t.offset);
    ASSERT_EQ(static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype), t.size);
    for (int64_t d : t.shape) ASSERT_GE(d, 0);
    if (i > 0) {
      ASSERT_LE(tensors[i - 1].offset, t.offset);
    }
    if (t.size > 0) {
      ASSERT_GE(t.offset, reach) << t.name << " overlaps";
      reach = t.offset + t.size;
    }
  }
}

TEST(CheckpointFuzzTest, MutatedHeaders) {
  const std::vector<Seed> seeds = FixtureSeeds();
  ASSERT_FALSE(seeds.empty());
  Mutator m(20240601);
  int accepted = 0;
  // The rules the mutations must reach, and how often each was hit.
  std::map<std::string, int> hits = {
      {"not valid JSON", 0}, {"unsupported dtype", 0},  {"is negative", 0},
      {"is too large", 0},   {"is not an integer", 0},  {"overflows 64 bits", 0},
      {"bytes but span", 0}, {"runs past the data", 0}, {"overlaps", 0},
      {"appears twice", 0},  {"not a JSON object", 0},  {"end before begin", 0}};
  for (int round = 0; round < kHeaderRounds; ++round) {
    const Seed& seed = seeds[m.Below(seeds.size())];
    const std::string header = m.Mutate(seed.header);
    const uint64_t data_size = m.DataSize(seed.data_size);
    StatusOr<std::vector<TensorInfo>> parsed = ParseSafetensorsHeader(header, data_size, "fuzz");
    if (parsed.ok()) {
      ++accepted;
      ExpectValidLayout(*parsed, data_size);
    } else {
      ASSERT_EQ(parsed.status().message().find('\n'), std::string::npos);
      ASSERT_EQ(parsed.status().message().rfind("fuzz: ", 0), 0u);
      for (auto& [text, count] : hits) {
        if (parsed.status().message().find(text) != std::string::npos) ++count;
      }
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Some mutations (e.g. a digit swapped in a name) leave a valid header;
  // most do not. Both sides must have been exercised.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, kHeaderRounds);
  for (const auto& [text, count] : hits) EXPECT_GT(count, 0) << "no mutation reached: " << text;
  std::cout << accepted << " of " << kHeaderRounds << " mutated headers accepted\n";
}

TEST(CheckpointFuzzTest, RandomHeaders) {
  Mutator m(7);
  for (int round = 0; round < kHeaderRounds / 4; ++round) {
    const std::string header = m.RandomBytes(256);
    StatusOr<std::vector<TensorInfo>> parsed = ParseSafetensorsHeader(header, m.Below(4096), "r");
    if (parsed.ok()) ExpectValidLayout(*parsed, 0);  // only `{}`-like headers can pass
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The guarantees of a successful ReadCheckpoint.
void ExpectValidCheckpoint(const Checkpoint& ckpt) {
  std::vector<int> seen(ckpt.tensors.size(), 0);
  auto visit = [&](const TensorGroup& g) {
    for (int i : g.tensors) ++seen[i];
  };
  visit(ckpt.embedding);
  visit(ckpt.head);
  visit(ckpt.other);
  for (size_t i = 0; i < ckpt.layers.size(); ++i) {
    ASSERT_EQ(ckpt.layers[i].layer, static_cast<int>(i));
    visit(ckpt.layers[i]);
  }
  ASSERT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  auto in_file = [&](const TensorInfo& t) {
    ASSERT_LT(t.file, static_cast<int>(ckpt.files.size()));
    const FileInfo& f = ckpt.files[t.file];
    ASSERT_GE(t.offset, f.data_offset);
    ASSERT_LE(t.offset + t.size, f.size);
  };
  for (const TensorInfo& t : ckpt.tensors) {
    if (!t.quant) {
      in_file(t);
      continue;
    }
    for (const TensorInfo& part : t.quant->parts) in_file(part);  // a quantized module's
  }
}

// Whole files: mutated headers, mutated length prefixes and mutated indexes
// of real fixtures, read back through ReadCheckpoint.
TEST(CheckpointFuzzTest, MutatedFiles) {
  TempDir tmp;
  const std::vector<std::string> fixtures = FixtureNames();
  Mutator m(99);
  int accepted = 0;
  for (int round = 0; round < kFileRounds; ++round) {
    const std::string dir = tmp.file("r" + std::to_string(round));
    const std::string fixture = fixtures[m.Below(fixtures.size())];
    std::filesystem::create_directories(dir);
    testing::WriteFileBytes(dir + "/config.json",
                            m.OneIn(20)
                                ? m.Mutate(ReadFileBytes(FixtureDir(fixture) + "/config.json"))
                                : ReadFileBytes(FixtureDir(fixture) + "/config.json"));
    for (const auto& entry : std::filesystem::directory_iterator(FixtureDir(fixture))) {
      const std::string name = entry.path().filename().string();
      if (name == "model.safetensors.index.json") {
        const std::string index = ReadFileBytes(entry.path().string());
        testing::WriteFileBytes(dir + "/" + name, m.OneIn(3) ? m.Mutate(index) : index);
      } else if (entry.path().extension() == ".safetensors") {
        const auto split = SplitSafetensors(ReadFileBytes(entry.path().string()));
        const std::string header = m.OneIn(4) ? split.header : m.Mutate(split.header);
        testing::WriteSafetensors(dir + "/" + name, header,
                                  m.DataSize(split.data_size) % (1ull << 40));
        if (m.OneIn(8)) {  // clobber a byte of the length prefix, in place
          std::fstream file(dir + "/" + name, std::ios::in | std::ios::out | std::ios::binary);
          file.seekp(static_cast<std::streamoff>(m.Below(8)));
          file.put(static_cast<char>(m.Below(256)));
        }
      }
    }
    StatusOr<Checkpoint> ckpt = ReadCheckpoint(dir);
    if (ckpt.ok()) {
      ++accepted;
      ExpectValidCheckpoint(*ckpt);
    } else {
      ASSERT_EQ(ckpt.status().message().find('\n'), std::string::npos);
    }
    if (::testing::Test::HasFatalFailure()) return;
    std::filesystem::remove_all(dir);
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, kFileRounds);
  std::cout << accepted << " of " << kFileRounds << " mutated checkpoints accepted\n";
}

}  // namespace
}  // namespace nightshift::checkpoint
