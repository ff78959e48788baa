#include "worker/checkpoint/test_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tests/testing/paths.h"
#include "worker/checkpoint/checkpoint.h"

namespace nightshift::checkpoint::testing {
namespace fs = std::filesystem;

std::string FixtureDir(const std::string& name) { return testutil::DataPath("models/" + name); }

std::vector<std::string> FixtureNames() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(FixtureDir("")))) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadFileBytes(const std::string& path) { return testutil::ReadFile(path); }

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  testutil::WriteFile(path, bytes);
}

void CopyFixture(const std::string& name, const std::string& dest) {
  fs::create_directories(dest);
  for (const auto& entry : fs::directory_iterator(FixtureDir(name))) {
    const std::string to = dest + "/" + entry.path().filename().string();
    WriteFileBytes(to, ReadFileBytes(entry.path().string()));
  }
}

SplitFile SplitSafetensors(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  return {bytes.substr(8, n), bytes.size() - 8 - n};
}

void WriteSafetensors(const std::string& path, const std::string& header, uint64_t data_size) {
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  WriteFileBytes(path, prefix + header);
  if (truncate(path.c_str(), static_cast<off_t>(8 + header.size() + data_size)) != 0) {
    std::cerr << "truncate " << path << " failed\n";
    std::abort();
  }
}

std::string PackedHeader(const nlohmann::json& tensors, uint64_t* data_size) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors.items()) {
    uint64_t bytes = DTypeSize(ParseDType(t["dtype"].get<std::string>()).value());
    for (const auto& d : t["shape"]) bytes *= d.get<uint64_t>();
    header[name] = {
        {"dtype", t["dtype"]}, {"shape", t["shape"]}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  *data_size = offset;
  return header.dump();
}

}  // namespace nightshift::checkpoint::testing
