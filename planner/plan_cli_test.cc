// `nightshift plan` end to end: runs the built binary, parses its JSON.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

std::string Quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `nightshift plan ARGS` with NIGHTSHIFT_STREAMING set to `streaming_env`
// (unset when empty).
CommandResult Plan(const std::vector<std::string>& args, const std::string& streaming_env = "") {
  fs::path err_file = fs::temp_directory_path() / ("plan_cli_test_" + std::to_string(getpid()));
  std::string cmd = streaming_env.empty()
                        ? "env -u NIGHTSHIFT_STREAMING "
                        : "env NIGHTSHIFT_STREAMING=" + Quote(streaming_env) + " ";
  cmd += Quote(Env("NIGHTSHIFT_BIN_DIR", "build/bin") + "/nightshift") + " plan";
  for (const std::string& a : args) cmd += " " + Quote(a);
  cmd += " 2>" + Quote(err_file.string());
  CommandResult run;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) run.out.append(buf, n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream ss;
  ss << err.rdbuf();
  run.err = ss.str();
  fs::remove(err_file);
  return run;
}

json PlanJson(const std::vector<std::string>& args, const std::string& streaming_env = "") {
  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  CommandResult run = Plan(with_json, streaming_env);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return json::parse(run.out);
}

std::string Model(const std::string& name) {
  return Env("NIGHTSHIFT_TEST_DATA", "tests/data") + "/models/" + name;
}

const std::vector<std::string> kSeed70b = {
    "--size-b", "70", "--layers", "80", "--budget-gb", "11", "--read-gbs", "4", "--free-gb", "900"};

TEST(PlanCliTest, CatalogFormMatchesTheSeed) {
  json j = PlanJson(kSeed70b);
  EXPECT_EQ(j["mode"], "catalog");
  EXPECT_EQ(j["resident_gb"], 6.1);
  EXPECT_EQ(j["fits"], true);
  EXPECT_EQ(j["est_tokens_per_s"], 0.024);
  EXPECT_EQ(j["answer_human"], "3.4 h");
  EXPECT_EQ(j["time_to_first_token_s"], 41.176);
  EXPECT_EQ(j["seconds_per_token"], 41.7);
  EXPECT_EQ(j["usable"], true);
  EXPECT_EQ(j["blockers"], json::array());
  EXPECT_EQ(j["checkpoint_gb"], 140.0);
  EXPECT_EQ(j["layers"], 80);
  EXPECT_EQ(j["layers_estimated"], false);
  EXPECT_EQ(j["kv_cache_gb"], 1.25);
  EXPECT_EQ(j["disk_fits"], true);
  EXPECT_EQ(j["seconds_per_pass"], 41.176);
  EXPECT_EQ(j["answer_seconds"], 12352.8);
  EXPECT_EQ(j["effective_tps"], 0.024);
  EXPECT_FALSE(j.contains("heuristic"));
}

TEST(PlanCliTest, EstimatedDepthAndUnsizedFootprint) {
  json j = PlanJson({"--size-b", "20", "--dtype", "Q4", "--budget-gb", "8", "--read-gbs", "2",
                     "--free-gb", "100", "--batch", "4", "--new-tokens", "50"});
  EXPECT_EQ(j["layers"], 56);
  EXPECT_EQ(j["layers_estimated"], true);
  EXPECT_EQ(j["checkpoint_gb"], 10.0);
  // 1.25 x 10/56 x 2 + 0.5 + 4 x 0.875
  EXPECT_EQ(j["resident_gb"], 4.4);
  EXPECT_EQ(j["seconds_per_pass"], 5.882);
  EXPECT_EQ(j["effective_tps"], 0.68);  // 200 tokens / 294.1 s
}

TEST(PlanCliTest, MemoryPoolsMakeTheBudget) {
  json vram = PlanJson(
      {"--size-b", "7", "--vram-gb", "4", "--ram-gb", "32", "--read-gbs", "4", "--free-gb", "900"});
  EXPECT_EQ(vram["budget_gb"], 3.68);
  json unified = PlanJson({"--size-b", "7", "--unified-gb", "96", "--available-ram-gb", "12",
                           "--read-gbs", "4", "--free-gb", "900"});
  EXPECT_EQ(unified["budget_gb"], 12.0);
  json ram = PlanJson({"--size-b", "7", "--ram-gb", "16", "--read-gbs", "4", "--free-gb", "900"});
  EXPECT_EQ(ram["budget_gb"], 12.8);
}

TEST(PlanCliTest, ExactFormFromAFixture) {
  json j = PlanJson(
      {"--model-dir", Model("gemma"), "--budget-gb", "11", "--read-gbs", "4", "--free-gb", "900"});
  EXPECT_EQ(j["mode"], "exact");
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["layers_estimated"], false);
  EXPECT_EQ(j["checkpoint_gb"], 0.00055);       // 550144 bytes
  EXPECT_EQ(j["disk"]["steady_gb"], 0.000552);  // 552216 bytes
  EXPECT_EQ(j["kv_bytes_per_token"], 512);      // 2 x 2 layers x 1 KV head x 32 x fp32
  EXPECT_EQ(j["kv_cache_gb"], 0.002097);        // 512 x 4096
  // 2 x 217600 (largest layer) + activations
  // 4 x (800 + 4 x 1 x 4096 + 448) + 256 MiB + KV 2097152 = 271038336 bytes
  EXPECT_EQ(j["resident_gb"], 0.271038);
  EXPECT_EQ(j["usable"], true);
  ASSERT_TRUE(j.contains("heuristic"));
  EXPECT_EQ(j["heuristic"]["layers"], 2);
  EXPECT_EQ(j["heuristic"]["layers_estimated"], false);
  EXPECT_EQ(j["heuristic"]["activation_gb"], 0.5);
}

TEST(PlanCliTest, ExactFormWorksForEveryFixtureFamily) {
  for (const char* name : {"gemma", "gpt-neox", "llama-bf16", "llama-fp16", "llama-gqa-sharded",
                           "llama3-tied-invfreq", "mistral", "phi3", "qwen2-bias", "qwen3-qknorm",
                           "stories260k", "mixtral", "qwen2-moe", "qwen3-moe"}) {
    json j = PlanJson({"--model-dir", Model(name), "--budget-gb", "2", "--read-gbs", "1",
                       "--free-gb", "1", "--device", "gpu"});
    EXPECT_EQ(j["mode"], "exact") << name;
    EXPECT_GT(j["resident_gb"].get<double>(), 0.268) << name;  // 256 MiB allowance and more
    EXPECT_GT(j["kv_bytes_per_token"].get<int>(), 0) << name;
    EXPECT_EQ(j["usable"], true) << name;
  }
}

// Exact form with a budget: the split between KV budget and pinned groups,
// each alternative priced from its streamed bytes.
TEST(PlanCliTest, ExactFormShowsTheMemorySplitAndItsAlternatives) {
  json j = PlanJson({"--model-dir", Model("gemma"), "--budget-gb", "0.2", "--read-gbs", "1",
                     "--free-gb", "1", "--batch", "4", "--context-k", "1"});
  ASSERT_TRUE(j.contains("memory_split")) << j.dump();
  const json& split = j["memory_split"];
  EXPECT_GT(split["working_set_bytes"].get<uint64_t>(), 0u);
  ASSERT_GE(split["alternatives"].size(), 3u);
  const uint64_t checkpoint = 550144;
  double best = 0;
  for (const json& a : split["alternatives"]) {
    EXPECT_EQ(a["kv_budget_bytes"], a["kv_sequences"].get<uint64_t>() * 512 * 1024);
    // gemma's head is tied: pinning it saves the copy, the embedding's rows are still read.
    EXPECT_GE(a["streamed_bytes"], checkpoint - a["pinned_bytes"].get<uint64_t>());
    EXPECT_GT(a["streamed_bytes"], 0u);
    EXPECT_DOUBLE_EQ(a["seconds_per_pass"].get<double>(), a["streamed_bytes"].get<double>() / 1e9);
    EXPECT_EQ(a["jobs_per_pass"], std::min<int64_t>(a["kv_sequences"].get<int64_t>(), 4));
    best = std::max(best, a["jobs_per_second"].get<double>());
  }
  // The queue of 4 decides: KV for exactly 4, everything else pinned (and
  // more KV only slows the passes down).
  EXPECT_EQ(split["chosen"]["kv_sequences"], 4);
  EXPECT_EQ(split["chosen"]["jobs_per_second"].get<double>(), best);
  // A budget the working set fills leaves no split.
  json tiny = PlanJson({"--model-dir", Model("gemma"), "--budget-gb", "0.000001", "--read-gbs", "1",
                        "--free-gb", "1"});
  EXPECT_TRUE(tiny["memory_split"]["alternatives"].empty());
  EXPECT_TRUE(tiny["memory_split"]["chosen"].is_null());
}

// A mixture of experts: qwen3-moe (layers 1 and 3 sparse, 8 experts of
// 24576 bytes, top 2; 1022976 bytes, 393216 of them experts'). Its facts,
// and the bytes a pass is expected to read at 1, 16 and 256 rows: with a
// slice per expert, 629760 dense + 2 layers x 8 x (1 - 0.75^B) x 24576.
TEST(PlanCliTest, ExactFormOnAMixtureOfExperts) {
  const std::vector<std::string> args = {
      "--model-dir", Model("qwen3-moe"), "--budget-gb", "2", "--read-gbs", "1", "--free-gb", "1"};
  std::vector<std::string> per_expert = args;
  per_expert.insert(per_expert.end(), {"--expert-slice", "24576"});
  json j = PlanJson(per_expert);
  ASSERT_TRUE(j.contains("moe")) << j.dump();
  const json& moe = j["moe"];
  EXPECT_EQ(moe["sparse_layers"], 2);
  EXPECT_EQ(moe["experts"], 8);
  EXPECT_EQ(moe["top_k"], 2);
  EXPECT_EQ(moe["expert_slice_bytes"], 24576);
  EXPECT_EQ(moe["total_bytes"], 1022976);
  EXPECT_EQ(moe["expert_bytes"], 393216);
  EXPECT_EQ(moe["dense_bytes"], 629760);
  EXPECT_EQ(moe["largest_expert_bytes"], 24576);
  EXPECT_EQ(moe["widest_slice_bytes"], 24576);
  EXPECT_EQ(moe["total_parameters"], 255744);
  EXPECT_EQ(moe["total_parameters"], j["parameters"]);
  EXPECT_EQ(moe["active_parameters"], 255744 - 2 * 6 * 6144);  // 6 of 8 experts idle
  const json& expected = moe["expected_bytes_per_pass"];
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(expected[0]["rows"], 1);
  EXPECT_EQ(expected[0]["bytes"], 629760 + 2 * 2 * 24576);  // 728064: top 2 of each layer
  EXPECT_EQ(expected[0]["experts_touched"], 2.0);
  EXPECT_EQ(expected[1]["rows"], 16);
  EXPECT_EQ(expected[1]["bytes"], 1019035);
  EXPECT_EQ(expected[2]["rows"], 256);
  EXPECT_EQ(expected[2]["bytes"], 1022976);
  // The plan's pass (batch 1) reads the 1-row figure; the checkpoint stays whole.
  EXPECT_EQ(j["checkpoint_gb"], 0.001023);
  EXPECT_EQ(j["pass_read_gb"], 0.000728);
  EXPECT_EQ(j["seconds_per_pass"], 0.001);  // the floor: 0.000728 GB at 1 GB/s / 0.85

  // At the engine's slice size a layer's 8 tiny experts share one slice, of
  // which a pass reads only the routed experts: the same figures.
  json whole = PlanJson(args);
  EXPECT_EQ(whole["moe"]["expert_slice_bytes"], 256 << 20);
  EXPECT_EQ(whole["moe"]["widest_slice_bytes"], 8 * 24576);
  ASSERT_EQ(whole["moe"]["expected_bytes_per_pass"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(whole["moe"]["expected_bytes_per_pass"][i]["bytes"], expected[i]["bytes"]);
  }
  EXPECT_EQ(whole["pass_read_gb"], 0.000728);

  // The human table prints the figures.
  CommandResult run = Plan(per_expert);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* text :
       {"mixture of experts: 2 of 4 layers sparse, 8 experts each, top 2", "255.7k total",
        "182.0k active per token", "read per pass (expected, 1 row)", "728064", "1019035",
        "1022976", "1 row", "16 rows", "256 rows"}) {
    EXPECT_NE(run.out.find(text), std::string::npos) << text << "\n" << run.out;
  }
}

// A dense checkpoint has no MoE report and reads all of itself.
TEST(PlanCliTest, ADenseCheckpointHasNoMoeReport) {
  json j = PlanJson({"--model-dir", Model("qwen3-qknorm"), "--budget-gb", "2", "--read-gbs", "1",
                     "--free-gb", "1"});
  EXPECT_FALSE(j.contains("moe"));
  EXPECT_FALSE(j.contains("pass_read_gb"));
  CommandResult run = Plan({"--model-dir", Model("qwen3-qknorm"), "--budget-gb", "2", "--read-gbs",
                            "1", "--free-gb", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.find("mixture of experts"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("checkpoint (read per pass)"), std::string::npos) << run.out;
}

TEST(PlanCliTest, CompareAddsTheResidentSide) {
  std::vector<std::string> args = {
      "--size-b", "70",        "--layers", "80",        "--budget-gb",  "160", "--read-gbs",
      "4",        "--free-gb", "900",      "--compare", "--mem-bw-gbs", "1008"};
  json j = PlanJson(args);
  ASSERT_TRUE(j.contains("compare"));
  EXPECT_EQ(j["compare"]["resident_seconds"], 59.5);
  EXPECT_EQ(j["compare"]["streamed_seconds"], 12352.8);
  EXPECT_EQ(j["compare"]["slowdown"], 207.6);
  EXPECT_TRUE(j["compare"]["verdict"].is_string());
  // Fits whole, so auto streaming is not needed.
  EXPECT_EQ(j["streaming"]["trigger"], "not-needed");
  EXPECT_EQ(j["streaming"]["activate"], false);
}

TEST(PlanCliTest, StreamingRequestFromFlagAndEnvironment) {
  EXPECT_EQ(PlanJson(kSeed70b)["streaming"]["trigger"], "fallback");  // nothing fits whole
  EXPECT_EQ(PlanJson(kSeed70b, "never")["streaming"]["trigger"], "disabled");
  std::vector<std::string> always = kSeed70b;
  always.insert(always.end(), {"--streaming", "always"});
  EXPECT_EQ(PlanJson(always, "never")["streaming"]["trigger"], "manual");  // the flag wins
  CommandResult bad = Plan(kSeed70b, "sometimes");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("NIGHTSHIFT_STREAMING"), std::string::npos) << bad.err;
}

TEST(PlanCliTest, HumanTable) {
  CommandResult run = Plan(kSeed70b);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("resident memory"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("6.10 GB"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("3.4 h"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("41.7"), std::string::npos) << run.out;
}

// A one-line error on stderr, nothing on stdout, and the given exit code.
void ExpectOneLineError(const std::vector<std::string>& args, int exit_code,
                        const std::string& mentions) {
  CommandResult run = Plan(args);
  EXPECT_EQ(run.exit_code, exit_code) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
  ASSERT_FALSE(run.err.empty());
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
  EXPECT_NE(run.err.find(mentions), std::string::npos) << run.err;
}

TEST(PlanCliTest, ASharedPrefixIsComputedOnceInTheFirstPass) {
  // The issue's night: 64 prompts of 1,500 shared + 50 own tokens.
  const std::vector<std::string> args = {"--model-dir",
                                         Model("gemma"),
                                         "--budget-gb",
                                         "11",
                                         "--read-gbs",
                                         "4",
                                         "--free-gb",
                                         "900",
                                         "--batch",
                                         "64",
                                         "--prompt-tokens",
                                         "1550",
                                         "--shared-prefix-tokens",
                                         "1500"};
  json j = PlanJson(args);
  EXPECT_EQ(j["tokens_per_pass"], 1500 + 64 * 50);
  EXPECT_EQ(j["shared_prefix"]["tokens"], 1500);
  EXPECT_EQ(j["shared_prefix"]["first_pass_tokens"], 4700);
  EXPECT_EQ(j["shared_prefix"]["first_pass_tokens_unshared"], 99200);
  EXPECT_EQ(j["shared_prefix"]["tokens_saved"], 94500);
  CommandResult text = Plan(args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("computes 4700 tokens instead of 99200 (21.1x fewer)"), std::string::npos)
      << text.out;
  json plain = PlanJson({"--model-dir", Model("gemma"), "--budget-gb", "11", "--read-gbs", "4",
                         "--free-gb", "900", "--batch", "64", "--prompt-tokens", "1550"});
  EXPECT_EQ(plain["tokens_per_pass"], 64 * 1550);
  EXPECT_FALSE(plain.contains("shared_prefix"));
}

TEST(PlanCliTest, BadInputIsAOneLineError) {
  const std::vector<std::string> machine = {"--budget-gb", "11",        "--read-gbs",
                                            "4",           "--free-gb", "900"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), machine.begin(), machine.end());
    return args;
  };
  ExpectOneLineError(with({"--size-b", "70", "--dtype", "fp5"}), 2, "'fp5'");
  ExpectOneLineError(with({"--size-b", "-70"}), 2, "--size-b");
  ExpectOneLineError(with({}), 2, "--size-b");
  ExpectOneLineError(with({"--size-b", "70", "--layers", "0"}), 2, "--layers");
  ExpectOneLineError(with({"--size-b", "671", "--moe"}), 2, "--layers");
  ExpectOneLineError(with({"--size-b", "70", "--batch", "0"}), 2, "--batch");
  ExpectOneLineError(with({"--size-b", "70", "--compare"}), 2, "--mem-bw-gbs");
  ExpectOneLineError({"--size-b", "70", "--read-gbs", "4", "--free-gb", "900"}, 2, "memory");
  ExpectOneLineError({"--size-b", "70", "--budget-gb", "-1", "--read-gbs", "4", "--free-gb", "9"},
                     2, "--budget-gb");
  ExpectOneLineError({"--size-b", "70", "--budget-gb", "11", "--free-gb", "900"}, 2, "--read-gbs");
  ExpectOneLineError(with({"--model-dir", Model("gemma"), "--size-b", "70"}), 2, "--model-dir");
  ExpectOneLineError(with({"--model-dir", Model("no-such-model")}), 1, "no-such-model");
  ExpectOneLineError(with({"--size-b", "70", "--expert-slice", "1G"}), 2, "--model-dir");
  ExpectOneLineError(with({"--model-dir", Model("qwen3-moe"), "--expert-slice", "lots"}), 2,
                     "--expert-slice");
  ExpectOneLineError(
      with({"--size-b", "7", "--prompt-tokens", "50", "--shared-prefix-tokens", "51"}), 2,
      "--shared-prefix-tokens");
}

TEST(PlanCliTest, CorruptCheckpointIsAOneLineError) {
  fs::path dir = fs::temp_directory_path() / ("plan_cli_corrupt_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"hidden_size": 64, "num_attention_heads": 4})";
  const std::string header_length_16("\x10\0\0\0\0\0\0\0", 8);
  std::ofstream(dir / "model.safetensors") << header_length_16 << "{not json}";
  ExpectOneLineError(
      {"--model-dir", dir.string(), "--budget-gb", "11", "--read-gbs", "4", "--free-gb", "900"}, 1,
      "model.safetensors");
  fs::remove_all(dir);
}

}  // namespace
