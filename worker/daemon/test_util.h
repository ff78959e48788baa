// Test helpers for the worker daemon: temporary directories (tests/testing)
// and a model root holding a real checkpoint in llama2.c's layout
// (stories260k; its weights are not a usable trained model, but its greedy
// output is checked against llama2.c) with a real tokenizer (the scheduler
// tests' tiny byte-level BPE, 262 ids, fits its 512-row vocabulary),
// assembled from the fixtures under NIGHTSHIFT_TEST_DATA.
#pragma once

#include <filesystem>
#include <string>

#include "tests/testing/paths.h"
#include "tests/testing/temp_dir.h"

namespace nightshift::worker::testing {

using testutil::TempDir;

// Writes `root/name`: stories260k's config.json and model.safetensors, plus
// tokenizer.json and tokenizer_config.json (with a ChatML template) unless
// `with_tokenizer` is false. Returns the directory.
inline std::string MakeStoriesModel(const std::string& root, const std::string& name,
                                    bool with_tokenizer = true) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(root) / name;
  fs::create_directories(dir);
  const fs::path model = fs::path(testutil::DataPath("models/stories260k"));
  for (const char* file : {"config.json", "model.safetensors"}) {
    fs::copy_file(model / file, dir / file, fs::copy_options::overwrite_existing);
  }
  if (with_tokenizer) {
    const fs::path tok = fs::path(testutil::DataPath("scheduler/tiny-model"));
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(tok / file, dir / file, fs::copy_options::overwrite_existing);
    }
  }
  return dir.string();
}

}  // namespace nightshift::worker::testing
