// The whole product on loopback: a real scheduler, two real workers, two
// generated models with real tokenizers, 200 jobs (completions, chat,
// classification) submitted as an OpenAI Batch file with `nightshift submit`,
// watched with `nightshift watch` and exported with `nightshift results`.
// Every job succeeds exactly once, and every output is what the engine gives
// when run directly (`nightshift run`) on the same prompt token ids and seeds,
// exactly: greedy and sampled tokens equal and label log-probabilities
// bitwise equal, although the workers' batches (sizes, top-ups, neighbours,
// one compute thread) differ from the direct run's (batch invariance, the
// default). A few jobs resubmitted alone give bitwise the outputs they had
// in the mixed batch. Run on this CPU's instruction sets and again with
// NIGHTSHIFT_MAX_ISA=avx2 (a CPU without AVX-512 or AVX512-BF16).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "common/metrics_test_util.h"
#include "scheduler/prompt_encoder.h"
#include "scheduler/test_util.h"
#include "tests/e2e/cluster.h"

namespace nightshift::e2e {
namespace {

using testutil::TempDir;

const std::vector<std::string> kLabels = {" yes", " no", " maybe"};

// One job as submitted and as the scheduler sees it (JobSpec's default
// temperature is 1, as OpenAI's; MakeJobs sets it for every generation job).
struct Job {
  json line;
  api::JobSpec spec;
};

// Sampled jobs: temperature only, seeded.
constexpr double kTemperature = 0.8;
constexpr uint64_t kFirstSeed = 1000;

// `count` jobs over `models`, interleaved (by default 100 per model of the
// two): per 10, three greedy completions, one sampled, three chats, three
// classifications; generation asks for 3 or 6 tokens. Sampled jobs of one
// model and length get consecutive seeds, as `nightshift run` seeds its
// prompts (seed + i).
std::vector<Job> MakeJobs(const std::vector<std::string>& models = {kLlama, kQwen},
                          int count = 200) {
  std::map<std::string, uint64_t> next_seed;  // model and length -> seed
  const std::vector<std::string> topics = {"the sea",  "a red fox", "old clocks", "rain",
                                           "a garden", "trains",    "the moon"};
  std::vector<Job> jobs;
  for (int i = 0; i < count; ++i) {
    const std::string& model = models[static_cast<size_t>(i) % models.size()];
    const std::string id = "job-" + std::to_string(i);
    const std::string topic = topics[i % topics.size()] + " #" + std::to_string(i);
    const int max_tokens = i % 4 < 2 ? 3 : 6;
    Job job;
    job.spec.custom_id = id;
    job.spec.model = model;
    job.spec.max_new_tokens = max_tokens;
    switch (i / 2 % 10) {
      case 0:
      case 1:
      case 2:
        job.line = CompletionLine(id, model, "Once upon a time, " + topic, max_tokens);
        job.spec.prompt_text = "Once upon a time, " + topic;
        job.spec.sampling.temperature = 0;
        break;
      case 3: {
        uint64_t& seed =
            next_seed.try_emplace(model + std::to_string(max_tokens), kFirstSeed).first->second;
        job.spec.sampling = {kTemperature, 1.0, 0, true, seed++};
        job.line =
            CompletionLine(id, model, "In a land far away, " + topic, max_tokens,
                           {{"temperature", kTemperature}, {"seed", job.spec.sampling.seed}});
        job.spec.prompt_text = "In a land far away, " + topic;
        break;
      }
      case 4:
      case 5:
      case 6:
        job.line = ChatLine(id, model, "Tell me about " + topic + ".", max_tokens);
        job.spec.endpoint = api::Endpoint::kChatCompletions;
        job.spec.prompt_kind = api::PromptKind::kChat;
        job.spec.messages = {{"user", "Tell me about " + topic + "."}};
        job.spec.sampling.temperature = 0;
        break;
      default:
        job.line = ClassifyLine(id, model, "Is " + topic + " nice? Answer:", kLabels);
        job.spec.prompt_text = "Is " + topic + " nice? Answer:";
        job.spec.labels = kLabels;
        break;
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// The model's tokenizer files as a worker uploads them.
api::TokenizerFiles TokenizerFilesOf(const std::string& model_dir) {
  api::TokenizerFiles files;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "chat_template.jinja", "chat_template.json"}) {
    if (std::filesystem::exists(model_dir + "/" + name)) {
      files.files[name] = ReadFile(model_dir + "/" + name);
    }
  }
  return files;
}

std::string JoinIds(const std::vector<int32_t>& ids, const char* separator = ",") {
  std::string out;
  for (int32_t id : ids) out += (out.empty() ? "" : separator) + std::to_string(id);
  return out;
}

// What `nightshift run` gives for one job.
struct Expected {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  std::string finish_reason;
  std::vector<double> label_logprobs;
};

// Runs the engine directly on every job: one `nightshift run` per model and
// max_tokens for generation, one per model and label token ids for
// classification. Fills `expected` by custom_id; failures are test failures.
class Reference {
 public:
  Reference(const std::string& models_root, const std::string& scratch)
      : root_(models_root), scratch_(scratch) {}

  void Add(const Job& job) {
    auto& encoder = encoders_[job.spec.model];
    if (encoder == nullptr) {
      auto created = scheduler::PromptEncoder::Create(
          TokenizerFilesOf(root_ + "/" + job.spec.model), scratch_ + "/cache");
      ASSERT_TRUE(created.ok()) << created.status().ToString();
      encoder = *created;
    }
    auto tokens = encoder->Encode(job.spec);
    ASSERT_TRUE(tokens.ok()) << job.spec.custom_id << ": " << tokens.status().ToString();
    expected_[job.spec.custom_id].prompt = tokens->prompt;
    const bool sampled = tokens->labels.empty() && job.spec.sampling.temperature > 0;
    std::string flags;
    if (!tokens->labels.empty()) {
      std::string labels;
      for (const auto& label : tokens->labels) {
        labels += (labels.empty() ? "" : ";") + JoinIds(label);
      }
      flags = "--labels '" + labels + "'";
    } else {
      flags = "--max-new-tokens " + std::to_string(job.spec.max_new_tokens);
      if (sampled) flags += " --temperature " + std::to_string(job.spec.sampling.temperature);
    }
    Group& group = groups_[job.spec.model + " " + flags];
    if (group.ids.empty()) {
      group.model = job.spec.model;
      group.flags = flags;
      group.sampled = sampled;
      group.first_seed = job.spec.sampling.seed;
    }
    if (sampled) {  // the run seeds its prompt i with --seed + i
      ASSERT_EQ(job.spec.sampling.seed, group.first_seed + group.ids.size()) << job.spec.custom_id;
    }
    group.ids.push_back(job.spec.custom_id);
  }

  // One `nightshift run` per group, or per kRunPrompts of it: a shell
  // command line is one argument, which Linux caps at 128 KiB.
  void Run() {
    constexpr size_t kRunPrompts = 16;
    for (const auto& [key, group] : groups_) {
      for (size_t first = 0; first < group.ids.size(); first += kRunPrompts) {
        const size_t n = std::min(kRunPrompts, group.ids.size() - first);
        std::string command = BinPath("nightshift") + " run --json --model-dir " + root_ + "/" +
                              group.model + " " + group.flags;
        if (group.sampled) command += " --seed " + std::to_string(group.first_seed + first);
        for (size_t i = first; i < first + n; ++i) {
          command += " --ids " + JoinIds(expected_[group.ids[i]].prompt);
        }
        Outcome run = Shell(command, scratch_ + "/run-stderr.txt", 120);
        ASSERT_EQ(run.code, 0) << command.substr(0, 400) << "...\n" << run.err;
        json doc = json::parse(run.out, nullptr, false);
        ASSERT_TRUE(doc.is_object()) << run.out;
        const json& sequences = doc["sequences"];
        ASSERT_EQ(sequences.size(), n) << run.out;
        for (size_t i = 0; i < n; ++i) Fill(sequences[i], &expected_[group.ids[first + i]]);
      }
    }
  }

  const Expected& operator[](const std::string& custom_id) { return expected_[custom_id]; }

 private:
  static void Fill(const json& sequence, Expected* out) {
    ASSERT_EQ(sequence["prompt_ids"].get<std::vector<int32_t>>(), out->prompt);
    if (sequence.contains("labels")) {
      for (const json& label : sequence["labels"]) {
        out->label_logprobs.push_back(label["logprob"]);
      }
    } else {
      out->generated = sequence["generated_ids"].get<std::vector<int32_t>>();
      out->finish_reason = sequence["finish_reason"];
    }
  }

  std::string root_;
  std::string scratch_;
  std::map<std::string, std::shared_ptr<const scheduler::PromptEncoder>> encoders_;
  std::map<std::string, Expected> expected_;
  // The jobs one `nightshift run` computes, in its prompt order.
  struct Group {
    std::string model;
    std::string flags;  // all but the seed
    bool sampled = false;
    uint64_t first_seed = 0;
    std::vector<std::string> ids;
  };
  std::map<std::string, Group> groups_;  // model and flags but the seed -> group
};

// Compares one generation job's tokens with the direct run's: equal.
void CheckGenerated(const std::string& custom_id, const json& output, const Expected& expected) {
  const std::vector<int32_t> got = output.value("token_ids", std::vector<int32_t>{});
  EXPECT_EQ(output.value("logprobs", json::array()).size(), got.size())
      << custom_id << ": a logprob per token";
  EXPECT_EQ(got, expected.generated)
      << custom_id << ": worker " << JoinIds(got) << ", direct " << JoinIds(expected.generated);
  EXPECT_EQ(output.value("finish_reason", ""), expected.finish_reason) << custom_id;
}

// Submits `jobs` as one batch file at `path`, runs the engine directly on
// them into `reference` while the cluster works, then waits for the
// submission with `nightshift watch` (its outcome in `watch`, which must
// succeed). The submission id; 0 when it was not accepted.
int64_t SubmitAndRunDirectly(Cluster& cluster, const std::vector<Job>& jobs,
                             const std::string& path, Reference& reference, Outcome* watch) {
  std::vector<json> lines;
  for (const Job& job : jobs) lines.push_back(job.line);
  const int64_t id = cluster.Submit(WriteJsonLines(path, lines));
  if (id <= 0) return 0;
  for (const Job& job : jobs) reference.Add(job);
  reference.Run();
  *watch = cluster.Nightshift("watch " + std::to_string(id), 150);
  EXPECT_EQ(watch->code, 0) << watch->out << watch->err << cluster.Logs();
  return id;
}

// Sets NIGHTSHIFT_MAX_ISA (empty: unsets it) for this process and the ones
// it starts, until destroyed.
class ScopedMaxIsa {
 public:
  explicit ScopedMaxIsa(const std::string& isa) {
    if (isa.empty()) {
      unsetenv("NIGHTSHIFT_MAX_ISA");
    } else {
      setenv("NIGHTSHIFT_MAX_ISA", isa.c_str(), 1);
    }
  }
  ~ScopedMaxIsa() { unsetenv("NIGHTSHIFT_MAX_ISA"); }
};

class BatchEndToEndIsaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchEndToEndIsaTest, TwoHundredJobsTwoModelsTwoWorkersMatchTheEngineRunDirectly) {
  const ScopedMaxIsa isa(GetParam());
  TempDir dir;
  const std::string root = dir.file("models");
  std::filesystem::create_directories(root);
  ASSERT_EQ(MakeCheckpoint(LlamaMini(), root + "/" + kLlama), "");
  ASSERT_EQ(MakeCheckpoint(QwenMini(), root + "/" + kQwen), "");

  Cluster cluster(dir.path());
  ASSERT_EQ(cluster.StartScheduler(/*lease_seconds=*/10), "");
  for (const char* id : {"w1", "w2"}) {
    ASSERT_NE(cluster.StartWorker(id, {root}, {"--max-batch-jobs", "25"}), nullptr);
  }
  for (const char* id : {"w1", "w2"}) {
    ASSERT_TRUE(cluster.WaitForWorker(id, {kLlama, kQwen}, 60)) << cluster.Logs();
  }

  const std::vector<Job> jobs = MakeJobs();
  Reference reference(root, dir.path());
  Outcome watch;
  const int64_t id =
      SubmitAndRunDirectly(cluster, jobs, dir.file("batch.jsonl"), reference, &watch);
  ASSERT_GT(id, 0) << cluster.last_error();
  EXPECT_NE(watch.out.find("done: 200 succeeded, 0 failed, 0 cancelled"), std::string::npos)
      << watch.out;

  const std::string out_file = dir.file("results.jsonl");
  Outcome results = cluster.Nightshift("results " + std::to_string(id) + " -o " + out_file);
  ASSERT_EQ(results.code, 0) << results.err;
  std::vector<json> rows = JsonLines(ReadFile(out_file));
  ASSERT_EQ(rows.size(), jobs.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["custom_id"], jobs[i].spec.custom_id) << "input order";
    EXPECT_TRUE(seen.insert(rows[i].value("custom_id", "")).second) << rows[i];
    EXPECT_TRUE(rows[i]["error"].is_null()) << rows[i];
    EXPECT_EQ(rows[i]["response"]["status_code"], 200) << rows[i];
  }

  // The store's view: outputs with token ids and logprobs.
  std::vector<json> stored = cluster.ListJobs(id);
  ASSERT_EQ(stored.size(), jobs.size());
  std::map<std::string, const Job*> by_custom_id;
  for (const Job& job : jobs) by_custom_id[job.spec.custom_id] = &job;
  std::set<std::string> workers;
  std::map<std::string, json> outputs;  // by custom_id
  for (const json& row : stored) {
    const std::string custom_id = row.value("custom_id", "");
    ASSERT_EQ(by_custom_id.count(custom_id), 1u) << row;
    const Job& job = *by_custom_id[custom_id];
    const Expected& expected = reference[custom_id];
    EXPECT_EQ(row["state"], "JOB_STATE_SUCCEEDED") << row;
    EXPECT_EQ(Int(row["prompt_tokens"]), static_cast<int64_t>(expected.prompt.size())) << row;
    workers.insert(row.value("worker_id", ""));
    const json& output = row["output"];
    outputs[custom_id] = output;
    if (job.spec.labels.empty()) {
      CheckGenerated(custom_id, output, expected);
      continue;
    }
    const json& labels = output["labels"];
    ASSERT_EQ(labels.size(), kLabels.size()) << row;
    for (size_t l = 0; l < kLabels.size(); ++l) {
      EXPECT_EQ(labels[l]["label"], kLabels[l]);
      EXPECT_EQ(labels[l].value("logprob", 0.0), expected.label_logprobs[l])
          << custom_id << " label " << l;
    }
  }
  EXPECT_EQ(workers, (std::set<std::string>{"w1", "w2"})) << "both workers ran jobs";

  // Jobs starting in one pass share their first prompt tokens (a template,
  // "Once upon a time, "), computed once: each output says how many of its
  // prompt tokens were, and `status` sums them.
  int64_t prompt_tokens = 0, cached = 0;
  for (const auto& [custom_id, output] : outputs) {
    EXPECT_LE(Int(output["cached_prompt_tokens"]), Int(output["prompt_tokens"])) << custom_id;
    prompt_tokens += Int(output["prompt_tokens"]);
    cached += Int(output["cached_prompt_tokens"]);
  }
  const Outcome status = cluster.Nightshift("status " + std::to_string(id) + " --json");
  ASSERT_EQ(status.code, 0) << status.err;
  const json sums = json::parse(status.out)["prompt_tokens"];
  EXPECT_EQ(Int(sums["jobs"]), static_cast<int64_t>(jobs.size())) << status.out;
  EXPECT_EQ(Int(sums["prompt_tokens"]), prompt_tokens) << status.out;
  EXPECT_EQ(Int(sums["cached_prompt_tokens"]), cached) << status.out;
  EXPECT_GT(cached, 0) << status.out;

  // Resubmitted alone (a batch of one on whichever worker takes it): a
  // greedy completion, a sampled one, a chat and a classification of each
  // model give bitwise the outputs they had among the 200, token logprobs
  // included.
  for (size_t i : {0, 1, 6, 7, 8, 9, 14, 15}) {
    const Job& job = jobs[i];
    const int64_t alone = cluster.Submit(
        WriteJsonLines(dir.file("alone-" + std::to_string(i) + ".jsonl"), {job.line}));
    ASSERT_GT(alone, 0) << cluster.last_error();
    const Outcome done = cluster.Nightshift("watch " + std::to_string(alone), 60);
    ASSERT_EQ(done.code, 0) << done.out << done.err;
    const std::vector<json> again = cluster.ListJobs(alone);
    ASSERT_EQ(again.size(), 1u);
    // The same but for what it shared: among the 200, some of its prompt
    // was computed once with its neighbours.
    json alone_output = again[0]["output"], among = outputs[job.spec.custom_id];
    alone_output.erase("cached_prompt_tokens");
    among.erase("cached_prompt_tokens");
    EXPECT_EQ(alone_output, among)
        << job.spec.custom_id << " alone differs from its run among the 200";
  }
  if (HasFailure()) std::cerr << cluster.Logs();
}

// "": the instruction sets this CPU has; avx2: a CPU without AVX-512 (the
// workers and the direct run alike).
INSTANTIATE_TEST_SUITE_P(InstructionSets, BatchEndToEndIsaTest, ::testing::Values("", "avx2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("host") : info.param;
                         });

// A long classification prompt: about `words` words of varied text.
std::string LongPrompt(int index, int words) {
  const std::vector<std::string> vocabulary = {
      "the",   "river",    "ran",    "past",    "an",    "old",    "mill",
      "where", "children", "once",   "played",  "under", "tall",   "trees",
      "and",   "every",    "spring", "brought", "rain",  "that",   "made",
      "green", "fields",   "shine",  "like",    "glass", "before", "noon"};
  std::string text = "Review " + std::to_string(index) + ":";
  for (int w = 0; w < words; ++w) {
    text += " " + vocabulary[static_cast<size_t>((w * 7 + index * 3 + w / 5) % 28)];
  }
  return text + ". Is this review positive? Answer:";
}

// The pass-token budget at work: 64 classifications of ~420 words with 3
// one-token labels, on a worker whose KV budget (4 MiB, 4 KiB per position
// here) holds only two such prompts' caches, run in at most 4 passes
// (counted by the worker's pass histogram), because a job that ends in its
// first pass reserves no KV and a pass feeds as many of them as its token
// budget allows, the scheduler topping the batch up at every boundary. The
// worker stays under its 1 GiB memory budget, and every label's log-
// probability is what `nightshift run --labels` gives.
TEST(BatchEndToEndTest, LongClassificationsFillPassesUpToThePassTokenBudget) {
  TempDir dir;
  const std::string root = dir.file("models");
  ModelShape shape;
  shape.arch = "qwen2";
  shape.hidden = 256;
  shape.layers = 4;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.intermediate = 512;
  shape.tie_embeddings = true;
  shape.tokenizer_dir = DataPath("tokenizers/qwen3");
  shape.seed = 13;
  const std::string model = "qwen2-256";
  ASSERT_EQ(MakeCheckpoint(shape, root + "/" + model), "");

  Cluster cluster(dir.path());
  ASSERT_EQ(cluster.StartScheduler(/*lease_seconds=*/20), "");
  Process* worker = cluster.StartWorker(
      "w1", {root}, {"--kv-budget", "4MiB", "--memory-budget", "1GiB", "--metrics-port", "0"});
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(cluster.WaitForWorker("w1", {model}, 60)) << cluster.Logs();
  const json workers = cluster.Workers();
  const json& advert = workers["workers"][0]["models"][0];
  // 4 KiB of KV per position: 4 MiB is 1024 positions, two prompts.
  ASSERT_EQ(Int(advert["kv_bytes_per_token"]), 2 * 4 * 2 * 64 * 4) << advert;
  const int port = testutil::WaitForLogPort(*worker, "metrics listening on ", 10);
  ASSERT_GT(port, 0) << cluster.Logs();

  std::vector<Job> jobs;
  for (int i = 0; i < 64; ++i) {
    Job job;
    job.spec.custom_id = "review-" + std::to_string(i);
    job.spec.model = model;
    job.spec.prompt_text = LongPrompt(i, 420);
    job.spec.labels = kLabels;
    job.line = ClassifyLine(job.spec.custom_id, model, job.spec.prompt_text, kLabels);
    jobs.push_back(std::move(job));
  }
  Reference reference(root, dir.path());
  Outcome watch;
  const int64_t id =
      SubmitAndRunDirectly(cluster, jobs, dir.file("reviews.jsonl"), reference, &watch);
  ASSERT_GT(id, 0) << cluster.last_error();

  // The default pass-token budget (64 MiB / 2 KiB of hidden state and one
  // layer's K/V per token) admits at least 16 of these prompts.
  const int64_t prompt_tokens =
      static_cast<int64_t>(reference[jobs[0].spec.custom_id].prompt.size());
  EXPECT_GT(prompt_tokens, 400);
  EXPECT_GE(Int(advert["pass_token_budget"]) / (prompt_tokens + 3), 16) << advert;

  const std::string metrics = metrics::testing::HttpGet(port, "/metrics").body();
  const std::string count = "nightshift_pass_duration_seconds_count{";
  const size_t at = metrics.find(count);
  ASSERT_NE(at, std::string::npos) << metrics;
  const double passes = std::stod(metrics.substr(metrics.find(' ', at) + 1));
  EXPECT_GE(passes, 1);
  EXPECT_LE(passes, 4) << "passes for 64 one-pass jobs";
  const std::string status = ReadFile("/proc/" + std::to_string(worker->pid()) + "/status");
  const size_t hwm = status.find("VmHWM:");
  ASSERT_NE(hwm, std::string::npos);
  const double hwm_bytes = std::stod(status.substr(hwm + 6)) * 1024;
  EXPECT_LE(hwm_bytes, 1024.0 * 1024 * 1024) << "worker VmHWM";
  std::cout << "64 classifications of " << prompt_tokens << "+ tokens: " << passes
            << " passes, worker VmHWM " << hwm_bytes / 1e6 << " MB, pass-token budget "
            << Int(advert["pass_token_budget"]) << "\n";

  std::vector<json> stored = cluster.ListJobs(id);
  ASSERT_EQ(stored.size(), jobs.size());
  for (const json& row : stored) {
    const std::string custom_id = row.value("custom_id", "");
    EXPECT_EQ(row["state"], "JOB_STATE_SUCCEEDED") << row;
    const json& labels = row["output"]["labels"];
    ASSERT_EQ(labels.size(), kLabels.size()) << row;
    for (size_t l = 0; l < kLabels.size(); ++l) {
      EXPECT_EQ(labels[l].value("logprob", 0.0), reference[custom_id].label_logprobs[l])
          << custom_id << " label " << l;
    }
  }
  if (HasFailure()) std::cerr << cluster.Logs();
}

// A mixture of experts (a generated Qwen3-MoE: 8 experts of 32, top 2, with
// Qwen3's tokenizer) through the scheduler: completions, a sampled one, chats
// and classifications give what `nightshift run` gives them directly, and the
// worker's pass reports count the experts it read.
TEST(BatchEndToEndTest, AMixtureOfExpertsRunsThroughTheSchedulerAsRunDoes) {
  TempDir dir;
  const std::string root = dir.file("models");
  ModelShape shape = QwenMini();
  shape.arch = "qwen3_moe";
  shape.extra_args = {"--experts", "8", "--top-k", "2", "--moe-intermediate", "32"};
  const std::string model = "qwen3-moe-mini";
  ASSERT_EQ(MakeCheckpoint(shape, root + "/" + model), "");

  Cluster cluster(dir.path());
  ASSERT_EQ(cluster.StartScheduler(/*lease_seconds=*/10), "");
  Process* worker = cluster.StartWorker("w1", {root}, {"--max-batch-jobs", "16"});
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(cluster.WaitForWorker("w1", {model}, 60)) << cluster.Logs();

  const std::vector<Job> jobs = MakeJobs({model}, 40);
  Reference reference(root, dir.path());
  Outcome watch;
  const int64_t id = SubmitAndRunDirectly(cluster, jobs, dir.file("moe.jsonl"), reference, &watch);
  ASSERT_GT(id, 0) << cluster.last_error();
  EXPECT_NE(watch.out.find("done: 40 succeeded, 0 failed, 0 cancelled"), std::string::npos)
      << watch.out;
  std::vector<json> stored = cluster.ListJobs(id);
  ASSERT_EQ(stored.size(), jobs.size());
  std::map<std::string, const Job*> by_custom_id;
  for (const Job& job : jobs) by_custom_id[job.spec.custom_id] = &job;
  for (const json& row : stored) {
    const std::string custom_id = row.value("custom_id", "");
    ASSERT_EQ(by_custom_id.count(custom_id), 1u) << row;
    const Expected& expected = reference[custom_id];
    EXPECT_EQ(row["state"], "JOB_STATE_SUCCEEDED") << row;
    if (by_custom_id[custom_id]->spec.labels.empty()) {
      CheckGenerated(custom_id, row["output"], expected);
      continue;
    }
    const json& labels = row["output"]["labels"];
    ASSERT_EQ(labels.size(), kLabels.size()) << row;
    for (size_t l = 0; l < kLabels.size(); ++l) {
      EXPECT_EQ(labels[l].value("logprob", 0.0), expected.label_logprobs[l])
          << custom_id << " label " << l;
    }
  }
  // The worker's log line of each pass: "experts read N of 16".
  EXPECT_NE(cluster.Logs().find(" of 16 ("), std::string::npos) << cluster.Logs();
  if (HasFailure()) std::cerr << cluster.Logs();
}

// The adaptive split: a worker given a memory budget and no --kv-budget
// streams a model that does not fit resident, and keeps KV only for the jobs
// in flight, pinning layers in the rest. With two short completions in
// flight every layer is pinned after the first pass, so their 8 passes read
// little more than one pass's layers (`--streaming always` reads 8 times
// that), with the tokens of `nightshift run`.
TEST(BatchEndToEndTest, AWorkerWithoutAKvBudgetPinsWhatTheJobsInFlightLeave) {
  TempDir dir;
  const std::string root = dir.file("models");
  ModelShape shape = LlamaMini();
  shape.hidden = 512;
  shape.layers = 8;
  shape.heads = 8;
  shape.kv_heads = 4;
  shape.intermediate = 1536;
  const std::string model = "llama-512";
  ASSERT_EQ(MakeCheckpoint(shape, root + "/" + model), "");  // 240 MB, float32

  Cluster cluster(dir.path());
  ASSERT_EQ(cluster.StartScheduler(/*lease_seconds=*/20), "");
  // Resident it needs ~510 MB with the runtime allowance: streamed at 450 MiB.
  Process* worker =
      cluster.StartWorker("w1", {root}, {"--memory-budget", "450MiB", "--metrics-port", "0"});
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(cluster.WaitForWorker("w1", {model}, 60)) << cluster.Logs();
  EXPECT_NE(worker->Log().find("pins as the jobs in flight leave room"), std::string::npos)
      << worker->Log();
  const json workers = cluster.Workers();
  const json& advert = workers["workers"][0]["models"][0];
  const double checkpoint_bytes = static_cast<double>(Int(advert["checkpoint_bytes"]));
  ASSERT_GT(checkpoint_bytes, 200e6) << advert;
  const int port = testutil::WaitForLogPort(*worker, "metrics listening on ", 10);
  ASSERT_GT(port, 0) << cluster.Logs();

  std::vector<Job> jobs;
  for (int i = 0; i < 2; ++i) {
    Job job;
    job.spec.custom_id = "story-" + std::to_string(i);
    job.spec.model = model;
    job.spec.prompt_text = "Once upon a time, story " + std::to_string(i);
    job.spec.max_new_tokens = 8;
    job.spec.sampling.temperature = 0;
    job.line = CompletionLine(job.spec.custom_id, model, job.spec.prompt_text, 8);
    jobs.push_back(std::move(job));
  }
  Reference reference(root, dir.path());
  Outcome watch;
  const int64_t id =
      SubmitAndRunDirectly(cluster, jobs, dir.file("stories.jsonl"), reference, &watch);
  ASSERT_GT(id, 0) << cluster.last_error();

  const std::string metrics = metrics::testing::HttpGet(port, "/metrics").body();
  const std::string series = "model=\"" + model + "\"";
  const double passes = MetricSample(metrics, "nightshift_pass_duration_seconds_count", series);
  const double pinned = MetricSample(metrics, "nightshift_pinned_bytes", series);
  const double read = MetricSample(metrics, "nightshift_checkpoint_read_bytes_total", series);
  EXPECT_GE(passes, 8) << metrics;
  // Every streamed group (the checkpoint less its embedding, read by rows).
  EXPECT_GT(pinned, 0.6 * checkpoint_bytes) << metrics;
  EXPECT_LT(read, 1.1 * pinned) << "bytes read in " << passes << " passes";
  std::cout << passes << " passes read " << read / 1e6 << " MB of a " << checkpoint_bytes / 1e6
            << " MB pass, " << pinned / 1e6 << " MB pinned\n";

  std::vector<json> stored = cluster.ListJobs(id);
  ASSERT_EQ(stored.size(), jobs.size());
  for (const json& row : stored) {
    const std::string custom_id = row.value("custom_id", "");
    EXPECT_EQ(row["state"], "JOB_STATE_SUCCEEDED") << row;
    CheckGenerated(custom_id, row["output"], reference[custom_id]);
  }
  if (HasFailure()) std::cerr << cluster.Logs();
}

}  // namespace
}  // namespace nightshift::e2e
