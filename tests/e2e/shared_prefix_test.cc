// Shared instructions end to end, through the HTTP Batch API: 500
// classification requests that share one long instruction (a few hundred
// tokens) and differ in a short item, with 3 labels, plus a few greedy
// generation requests behind the same instruction, uploaded with POST
// /v1/files and run with POST /v1/batches on a worker whose pass-token
// budget holds the instruction once and a few dozen items. The scheduler
// groups them, the engine computes the instruction once per pass, and
// every request's output (label log-probabilities and probabilities as
// printed, the chosen label, generated text, token logprobs, finish reason,
// usage) is exactly what the same request gets alone: batch invariance
// with shared prefixes.

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <boost/beast/http.hpp>

#include "common/metrics_test_util.h"
#include "tests/e2e/cluster.h"
#include "tests/testing/http_client.h"
#include "tests/testing/temp_dir.h"

namespace nightshift::e2e {
namespace {

namespace bhttp = boost::beast::http;
using testutil::TempDir;

using Reply = testutil::HttpReply;
using testutil::HttpCall;

// Uploads `lines` as a batch file, creates a /v1/completions batch of it,
// polls it until it is completed (or `timeout_seconds` pass) and returns
// the output file's lines by custom_id. Failures are test failures.
std::map<std::string, json> RunBatch(const std::string& http, const std::vector<json>& lines,
                                     double timeout_seconds) {
  std::string file;
  for (const json& line : lines) file += line.dump() + "\n";
  const Reply upload = HttpCall(http, bhttp::verb::post, "/v1/files",
                                testutil::MultipartBatchFile(file), testutil::kMultipartBatchFile);
  EXPECT_EQ(upload.status, 200) << upload.body;
  if (upload.status != 200) return {};
  const Reply created = HttpCall(http, bhttp::verb::post, "/v1/batches",
                                 json{{"input_file_id", upload.value["id"]},
                                      {"endpoint", "/v1/completions"},
                                      {"completion_window", "24h"}}
                                     .dump());
  EXPECT_EQ(created.status, 200) << created.body;
  if (created.status != 200) return {};
  const std::string id = created.value.value("id", "");
  Reply batch;
  const bool ended = WaitUntil(
      [&] {
        batch = HttpCall(http, bhttp::verb::get, "/v1/batches/" + id);
        const std::string status = batch.value.is_object() ? batch.value.value("status", "") : "";
        return status == "completed" || status == "failed" || status == "expired" ||
               status == "cancelled";
      },
      timeout_seconds);
  EXPECT_TRUE(ended) << "batch " << id << " not done in " << timeout_seconds
                     << " s: " << batch.body;
  EXPECT_EQ(batch.value.value("status", ""), "completed") << batch.body;
  EXPECT_EQ(batch.value["request_counts"]["completed"], lines.size()) << batch.body;
  EXPECT_EQ(batch.value["request_counts"]["failed"], 0) << batch.body;
  if (!batch.value.is_object() || !batch.value["output_file_id"].is_string()) return {};
  const Reply output =
      HttpCall(http, bhttp::verb::get,
               "/v1/files/" + batch.value["output_file_id"].get<std::string>() + "/content");
  EXPECT_EQ(output.status, 200) << output.body.substr(0, 400);
  std::map<std::string, json> by_custom_id;
  for (const json& row : JsonLines(output.body)) {
    const std::string custom_id = row.is_object() ? row.value("custom_id", "") : "";
    EXPECT_TRUE(by_custom_id.emplace(custom_id, row).second) << "twice or no custom_id: " << row;
  }
  return by_custom_id;
}

// The worker's pass figures that tell whether prefixes were shared.
struct Sharing {
  double prompt_tokens = -1;    // prompt and label tokens fed
  double computed_tokens = -1;  // rows the passes computed (decode steps included)
  double shared_tokens = -1;    // rows two or more sequences held
  double generated_tokens = -1;
};

Sharing Scrape(int port, const std::string& model) {
  const std::string metrics = metrics::testing::HttpGet(port, "/metrics").body();
  const std::string series = "model=\"" + model + "\"";
  Sharing s;
  s.prompt_tokens = MetricSample(metrics, "nightshift_prompt_tokens_total", series);
  s.computed_tokens = MetricSample(metrics, "nightshift_pass_tokens_computed_total", series);
  s.shared_tokens = MetricSample(metrics, "nightshift_shared_prefix_tokens_total", series);
  s.generated_tokens = MetricSample(metrics, "nightshift_generated_tokens_total", series);
  return s;
}

std::ostream& operator<<(std::ostream& out, const Sharing& s) {
  return out << s.prompt_tokens << " prompt tokens, " << s.computed_tokens << " computed, "
             << s.shared_tokens << " in shared prefixes, " << s.generated_tokens << " generated";
}

// Each pass's sequences in a worker's log ("batch B pass P: ... N
// sequences, T tokens (F fed, S in shared prefixes, ...), ...").
struct PassLine {
  int64_t sequences = 0;
  int64_t tokens = 0;
  int64_t shared = 0;  // 0 when the line names no shared prefix
};

std::vector<PassLine> PassLines(const std::string& log, std::set<std::string>* batches) {
  static const std::regex pass(
      R"(batch (\d+) pass \d+: .* (\d+) sequences, (\d+) tokens( \((\d+) fed, (\d+) in shared prefixes)?)");
  std::vector<PassLine> passes;
  for (const std::string& line : Lines(log)) {
    std::smatch m;
    if (!std::regex_search(line, m, pass)) continue;
    batches->insert(m[1]);
    passes.push_back({std::stoll(m[2]), std::stoll(m[3]), m[6].matched ? std::stoll(m[6]) : 0});
  }
  return passes;
}

// What must be equal between two runs of one request: the body less the
// job's id, its time and how many of its prompt tokens it shared (checked
// apart: some in the batch, none alone).
json Comparable(const json& row) {
  json body = row.is_object() ? row["response"]["body"] : json();
  if (body.is_object()) {
    body.erase("id");
    body.erase("created");
    if (body["usage"].is_object()) body["usage"].erase("prompt_tokens_details");
  }
  return body;
}

int64_t CachedTokens(const json& row) {
  return row["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

const std::vector<std::string> kLabels = {" positive", " negative", " neutral"};
constexpr int kClassifications = 500;
constexpr int kGenerations = 10;

// The shared instruction: a task statement and 24 labelled examples, about
// 517 tokens with Mistral's tokenizer (a prompt is ~530, in a 4096 context).
std::string Instruction() {
  const std::vector<std::string> things = {"soup",  "service", "room",   "train",
                                           "film",  "shoes",   "coffee", "concert",
                                           "hotel", "book",    "phone",  "garden"};
  const std::vector<std::pair<std::string, std::string>> verdicts = {
      {"was wonderful and I would gladly come back", "positive"},
      {"was cold, late and far too expensive", "negative"},
      {"was about what I expected, nothing more", "neutral"}};
  std::string text =
      "You are a careful annotator. Read the customer review below and classify its "
      "sentiment as positive, negative or neutral. Answer with one word. Here are examples "
      "of reviews and the sentiment an expert gave them:\n";
  for (int i = 0; i < 24; ++i) {
    const auto& [verdict, label] = verdicts[static_cast<size_t>(i * 5 % 3)];
    text += "Review: The " + things[static_cast<size_t>(i) % things.size()] + " " + verdict +
            ".\nSentiment: " + label + "\n";
  }
  return text + "Now the review to classify.\n";
}

// A short distinct item per request (about 15 tokens).
std::string Item(int i) {
  const std::vector<std::string> adjectives = {"quiet", "noisy", "bright", "dull", "fresh",
                                               "stale", "kind",  "rude",   "slow", "quick"};
  const std::vector<std::string> nouns = {"waiter", "bus", "lamp", "bread", "desk", "street",
                                          "movie",  "tea", "bed",  "staff", "park"};
  return "Review #" + std::to_string(i) + ": The " + nouns[static_cast<size_t>(i) % nouns.size()] +
         " was " + adjectives[static_cast<size_t>(i / 11) % adjectives.size()] + ".\nSentiment:";
}

TEST(SharedPrefixEndToEndTest, FiveHundredRequestsSharingAnInstructionEqualEachAlone) {
  const auto start = std::chrono::steady_clock::now();
  TempDir dir;
  const std::string root = dir.file("models");
  ASSERT_EQ(MakeCheckpoint(LlamaMini(), root + "/" + kLlama), "");
  const std::string model = kLlama;

  // The batch: classifications, with a greedy generation behind the same
  // instruction every 50 lines, so generations (which keep their KV across
  // passes and decode after their first pass) share passes and the prefix
  // with classifications.
  const std::string instruction = Instruction();
  std::vector<json> lines;
  for (int i = 0; i < kClassifications; ++i) {
    lines.push_back(
        ClassifyLine("review-" + std::to_string(i), model, instruction + Item(i), kLabels));
    if (i % (kClassifications / kGenerations) == 17) {
      const int g = i / (kClassifications / kGenerations);
      lines.push_back(CompletionLine("explain-" + std::to_string(g), model,
                                     instruction + Item(1000 + g) + " Why?", 2 + g % 3));
    }
  }
  ASSERT_EQ(lines.size(), static_cast<size_t>(kClassifications + kGenerations));

  Cluster cluster(dir.path());
  ASSERT_EQ(
      cluster.StartScheduler(/*lease_seconds=*/20, "127.0.0.1:0", {"--http-listen", "127.0.0.1:0"}),
      "");
  ASSERT_NE(cluster.http_address(), "");

  // Shared: a pass feeds 1536 tokens at most: the instruction once (517)
  // and some 55-70 items (~18 tokens with their labels), far from all 510
  // requests (~270,000 tokens unshared), so the batch takes a dozen passes,
  // topped up at each boundary.
  constexpr int kPassTokenBudget = 1536;
  Process* shared = cluster.StartWorker(
      "shared", {root},
      {"--pass-token-budget", std::to_string(kPassTokenBudget), "--metrics-port", "0"});
  ASSERT_NE(shared, nullptr);
  ASSERT_TRUE(cluster.WaitForWorker("shared", {model}, 60)) << cluster.Logs();
  const int shared_port = testutil::WaitForLogPort(*shared, "metrics listening on ", 10);
  ASSERT_GT(shared_port, 0) << cluster.Logs();

  std::map<std::string, json> together = RunBatch(cluster.http_address(), lines, 120);
  ASSERT_EQ(together.size(), lines.size()) << cluster.Logs();
  const Sharing sharing = Scrape(shared_port, model);
  std::set<std::string> shared_batches;
  const std::vector<PassLine> shared_passes = PassLines(shared->Log(), &shared_batches);
  const auto shared_done = std::chrono::steady_clock::now();

  // Alone: the same 510 lines as a second batch, on a worker that takes one
  // job per batch (--max-batch-jobs 1), started after the first worker is
  // gone. Every request then runs in passes that hold no other sequence,
  // which is all "submitted alone" means to the engine (a sequence's
  // results depend only on the passes it rides), through the same HTTP
  // path, in one upload: 510 one-line batches would cost 510 uploads,
  // batch validations and finalizations for the same passes. The worker's
  // log proves each pass held one sequence.
  shared->Signal(SIGKILL);
  shared->Wait(10);
  Process* alone =
      cluster.StartWorker("alone", {root}, {"--max-batch-jobs", "1", "--metrics-port", "0"});
  ASSERT_NE(alone, nullptr);
  ASSERT_TRUE(cluster.WaitForWorker("alone", {model}, 60)) << cluster.Logs();
  const int alone_port = testutil::WaitForLogPort(*alone, "metrics listening on ", 10);
  ASSERT_GT(alone_port, 0) << cluster.Logs();
  std::map<std::string, json> by_itself = RunBatch(cluster.http_address(), lines, 240);
  ASSERT_EQ(by_itself.size(), lines.size()) << cluster.Logs();
  const Sharing unshared = Scrape(alone_port, model);
  // And literally alone: two of the requests (a classification and a
  // generation) each as a one-line batch of its own.
  std::map<std::string, json> one_line;
  for (const json& line : lines) {
    const std::string custom_id = line["custom_id"];
    if (custom_id != "review-250" && custom_id != "explain-3") continue;
    std::map<std::string, json> single = RunBatch(cluster.http_address(), {line}, 60);
    ASSERT_EQ(single.size(), 1u) << cluster.Logs();
    one_line[custom_id] = single[custom_id];
  }
  ASSERT_EQ(one_line.size(), 2u);
  std::set<std::string> alone_batches;
  const std::vector<PassLine> alone_passes = PassLines(alone->Log(), &alone_batches);
  const auto alone_done = std::chrono::steady_clock::now();

  // Every request's output is the same, number for number as printed (two
  // doubles print alike exactly when they are bitwise equal).
  int equal = 0, differ = 0, generated = 0;
  for (const json& line : lines) {
    const std::string custom_id = line["custom_id"];
    const json& a = together[custom_id];
    const json& b = by_itself[custom_id];
    ASSERT_TRUE(a.is_object() && b.is_object()) << custom_id;
    EXPECT_TRUE(a["error"].is_null()) << a;
    EXPECT_EQ(a["response"]["status_code"], 200) << a;
    EXPECT_EQ(b["response"]["status_code"], 200) << b;
    const json body = Comparable(a);
    const json& choice = body["choices"][0];
    if (line["body"].contains("labels")) {
      ASSERT_EQ(body["labels"].size(), kLabels.size()) << a;
      EXPECT_EQ(choice["finish_reason"], "label") << a;
      // The chosen label is the most likely one.
      std::string best;
      double best_logprob = 0;
      for (const json& l : body["labels"]) {
        if (best.empty() || l["logprob"].get<double>() > best_logprob) {
          best = l["label"];
          best_logprob = l["logprob"];
        }
      }
      EXPECT_EQ(choice["text"], best) << a;
    } else {
      ++generated;
      EXPECT_EQ(choice["finish_reason"], "length") << a;
      EXPECT_EQ(body["usage"]["completion_tokens"], line["body"]["max_tokens"]) << a;
      EXPECT_EQ(choice["logprobs"]["token_logprobs"].size(), line["body"]["max_tokens"]) << a;
    }
    // The instruction (517 tokens) was computed once for several requests.
    EXPECT_GE(CachedTokens(a), 500) << a;
    EXPECT_EQ(CachedTokens(b), 0) << b;
    if (body.dump() == Comparable(b).dump()) {
      ++equal;
    } else if (++differ <= 5) {  // the first few in full
      ADD_FAILURE() << custom_id << " differs among the batch and alone:\n  batch: " << body.dump()
                    << "\n  alone: " << Comparable(b).dump();
    }
  }
  EXPECT_EQ(equal, static_cast<int>(lines.size())) << differ << " requests differ";
  for (const auto& [custom_id, row] : one_line) {
    EXPECT_EQ(Comparable(row).dump(), Comparable(together[custom_id]).dump())
        << custom_id << " in a batch of its own (first) and among the 510 (second)";
  }
  EXPECT_EQ(generated, kGenerations);

  // Sharing happened: the instruction was computed once per pass, not once
  // per request. Unshared, a pass computes every prompt and label token
  // (and one per decode step).
  EXPECT_GT(sharing.shared_tokens, 0) << sharing;
  EXPECT_LT(sharing.computed_tokens, 0.1 * sharing.prompt_tokens) << sharing;
  // Alone, nothing is shared and every fed token is computed, and a decode
  // step for each generated token but a generation's first: the same
  // prompt tokens, 10x or more the shared run's computed ones.
  EXPECT_EQ(unshared.prompt_tokens, sharing.prompt_tokens) << unshared;
  EXPECT_EQ(unshared.generated_tokens, sharing.generated_tokens) << unshared;
  EXPECT_EQ(unshared.shared_tokens, 0) << unshared;
  EXPECT_EQ(unshared.computed_tokens,
            unshared.prompt_tokens + unshared.generated_tokens - kGenerations)
      << unshared;

  // Many jobs rode each shared pass, never all of them: several passes.
  int64_t most = 0;
  for (const PassLine& p : shared_passes) most = std::max(most, p.sequences);
  EXPECT_GE(most, 30) << "sequences in the fullest shared pass";
  EXPECT_LT(most, static_cast<int64_t>(lines.size()));
  EXPECT_GE(shared_passes.size(), 5u);
  // A pass computed the whole instruction (517 tokens) once for all its
  // sequences.
  int64_t most_shared = 0;
  for (const PassLine& p : shared_passes) most_shared = std::max(most_shared, p.shared);
  EXPECT_GE(most_shared, 500) << shared->Log();
  for (const PassLine& p : shared_passes) {
    EXPECT_LE(p.tokens, kPassTokenBudget) << "a shared pass over the pass-token budget";
  }
  // Alone: one sequence in every pass, a pass or more per request.
  EXPECT_GE(alone_passes.size(), lines.size());
  for (const PassLine& p : alone_passes) ASSERT_EQ(p.sequences, 1) << alone->Log();

  const auto seconds = [](auto from, auto to) {
    return std::chrono::duration<double>(to - from).count();
  };
  std::cout << lines.size() << " requests: shared " << shared_passes.size() << " passes in "
            << shared_batches.size() << " batches (at most " << most << " sequences a pass; "
            << sharing << "), " << seconds(start, shared_done) << " s; alone "
            << alone_passes.size() << " passes, " << unshared << ", "
            << seconds(shared_done, alone_done) << " s\n";
  if (HasFailure()) std::cerr << cluster.Logs();
}

}  // namespace
}  // namespace nightshift::e2e
