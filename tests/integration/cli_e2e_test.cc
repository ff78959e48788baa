// The `nightshift` scheduler commands end to end: the real
// nightshift-scheduler and the scripted nightshift-fake-worker on loopback,
// the real `nightshift` binary run as a user would. submit -> watch ->
// results checked field by field against the OpenAI Batch formats; malformed
// files refused whole with line-numbered errors and nothing submitted; watch
// on a non-terminal; status, list, cancel, workers and estimate with --json.

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "scheduler/test_util.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "tests/testing/tiny_fs.h"

namespace nightshift::cli {
namespace {

using json = nlohmann::json;
using testutil::Process;
using testutil::TempDir;

using testutil::BinPath;
using testutil::DataPath;
using testutil::Lines;
using testutil::ReadFile;

using Outcome = testutil::ShellOutcome;

class CliEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartScheduler({});
    worker_ =
        Process::Start({BinPath("nightshift-fake-worker"), "--scheduler", address_, "--id", "w1",
                        "--model", "tiny", "--tokenizer-dir", DataPath("scheduler/tiny-model"),
                        "--pass-seconds", "0.05", "--fail-custom-id", "doomed"},
                       dir_.file("worker.log"));
    ASSERT_NE(worker_, nullptr);
    // Jobs may name only models a worker has advertised: wait for its attach.
    for (int i = 0; i < 400 && scheduler_->Log().find("worker w1 attached") == std::string::npos;
         ++i) {
      usleep(50'000);
    }
    ASSERT_NE(scheduler_->Log().find("worker w1 attached"), std::string::npos) << worker_->Log();
  }

  // Starts the scheduler (by default on a free loopback port) and sets
  // address_.
  void StartScheduler(const std::vector<std::string>& extra,
                      const std::string& listen = "127.0.0.1:0") {
    std::vector<std::string> argv =
        testutil::SchedulerArgv(dir_.file("state.db"), "2", "0.2", listen);
    argv.insert(argv.end(), extra.begin(), extra.end());
    scheduler_ = Process::Start(argv, dir_.file("scheduler.log"));
    ASSERT_NE(scheduler_, nullptr);
    address_ = testutil::WaitForListenAddress(*scheduler_, 20);
    ASSERT_FALSE(address_.empty()) << scheduler_->Log();
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "---- scheduler log:\n" << scheduler_->Log();
      if (worker_ != nullptr) std::cerr << "---- worker log:\n" << worker_->Log();
    }
  }

  // Runs `ENV nightshift ARGS --scheduler ADDRESS` with stdout on a pipe
  // (not a terminal). Unless `env` says otherwise, no config file or token
  // from the environment leaks in.
  Outcome Nightshift(const std::string& args, const std::string& env = kCleanEnv,
                     bool with_address = true) {
    return Shell(env + " " + BinPath("nightshift") + " " + args +
                 (with_address ? " --scheduler " + address_ : ""));
  }

  // Runs a shell command line; stdout and stderr are captured apart.
  Outcome Shell(const std::string& command_line) {
    return testutil::RunShell(command_line, dir_.file("stderr.txt"));
  }

  static constexpr const char* kCleanEnv = "NIGHTSHIFT_CONFIG=/nonexistent NIGHTSHIFT_TOKEN=";

  std::string Write(const std::string& name, const std::vector<json>& lines) {
    std::ofstream out(dir_.file(name));
    for (const json& line : lines) out << line.dump() << "\n";
    return dir_.file(name);
  }

  static json Completion(const std::string& id, json body) {
    body["model"] = "tiny";
    return {{"custom_id", id}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", body}};
  }

  int64_t Submit(const std::string& file, const std::string& extra = "") {
    Outcome run = Nightshift("submit " + file + " --json " + extra);
    EXPECT_EQ(run.code, 0) << run.err;
    json reply = json::parse(run.out, nullptr, false);
    EXPECT_TRUE(reply.is_object()) << run.out;
    return reply.is_object() ? reply.value("submission_id", int64_t{0}) : 0;
  }

  TempDir dir_;
  std::unique_ptr<Process> scheduler_;
  std::unique_ptr<Process> worker_;
  std::string address_;
};

TEST_F(CliEndToEndTest, SubmitWatchResultsRoundTrip) {
  std::vector<json> input = {
      Completion("gen", {{"prompt", "hello gen"}, {"max_tokens", 3}, {"logprobs", 1}}),
      Completion("cls", {{"prompt", "is it ok?"}, {"labels", {" yes", " no"}}}),
      Completion("doomed", {{"prompt", "this one fails"}, {"max_tokens", 2}}),
  };
  input.push_back({{"custom_id", "chat"},
                   {"method", "POST"},
                   {"url", "/v1/chat/completions"},
                   {"body",
                    {{"model", "tiny"},
                     {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"max_tokens", 2}}}});
  const int64_t id = Submit(Write("in.jsonl", input));
  ASSERT_GT(id, 0);

  Outcome watch = Nightshift("watch " + std::to_string(id) + " --utc");
  EXPECT_EQ(watch.code, 1) << watch.err;  // one job failed
  std::vector<std::string> lines = Lines(watch.out);
  ASSERT_GE(lines.size(), 2u) << watch.out;
  EXPECT_EQ(watch.out.find('\r'), std::string::npos);  // not a terminal: no bar
  EXPECT_EQ(lines[0].rfind("submission " + std::to_string(id) + ": ", 0), 0u) << lines[0];
  EXPECT_EQ(lines.back(), "submission " + std::to_string(id) +
                              " done: " + std::to_string(input.size() - 1) +
                              " succeeded, 1 failed, 0 cancelled");

  const std::string out_file = dir_.file("out.jsonl");
  Outcome results = Nightshift("results " + std::to_string(id) + " -o " + out_file);
  ASSERT_EQ(results.code, 0) << results.err;
  std::vector<std::string> out = Lines(ReadFile(out_file));
  ASSERT_EQ(out.size(), input.size());
  std::vector<json> rows;
  for (size_t i = 0; i < out.size(); ++i) {
    rows.push_back(json::parse(out[i]));
    EXPECT_EQ(rows[i]["custom_id"], input[i]["custom_id"]) << "input order";
    EXPECT_EQ(rows[i]["id"].get<std::string>().rfind("batch_req_", 0), 0u);
    EXPECT_EQ(rows[i]["response"]["request_id"].get<std::string>().rfind("req_", 0), 0u);
  }

  const json& gen = rows[0];
  EXPECT_TRUE(gen["error"].is_null());
  EXPECT_EQ(gen["response"]["status_code"], 200);
  const json& body = gen["response"]["body"];
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["choices"][0]["text"], "fake output for gen");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][0]["logprobs"]["tokens"], json({"t1", "t2", "t3"}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["token_logprobs"], json({-0.5, -0.5, -0.5}));
  EXPECT_EQ(body["choices"][0]["logprobs"]["top_logprobs"][0], json({{"t1", -0.5}}));
  EXPECT_EQ(body["usage"]["prompt_tokens"], 9);  // one byte a token in the tiny tokenizer
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  EXPECT_EQ(body["usage"]["total_tokens"], 12);
  ASSERT_TRUE(body["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer())
      << body["usage"];

  const json& cls = rows[1]["response"]["body"];
  EXPECT_EQ(cls["choices"][0]["text"], " yes");  // the best label
  EXPECT_EQ(cls["choices"][0]["finish_reason"], "label");
  ASSERT_EQ(cls["labels"].size(), 2u);
  EXPECT_EQ(cls["labels"][0]["label"], " yes");
  EXPECT_EQ(cls["labels"][0]["logprob"], -0.5);
  EXPECT_EQ(cls["labels"][1]["logprob"], -1.0);
  EXPECT_NEAR(cls["labels"][0]["prob"].get<double>() + cls["labels"][1]["prob"].get<double>(), 1,
              1e-9);

  const json& doomed = rows[2];
  EXPECT_EQ(doomed["response"]["status_code"], 500);
  EXPECT_TRUE(doomed["response"]["body"].is_null());
  EXPECT_EQ(doomed["error"]["code"], "job_failed");
  EXPECT_EQ(doomed["error"]["message"], "fake failure for doomed");

  const json& chat = rows[3]["response"]["body"];
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "fake output for chat");
  EXPECT_TRUE(chat["choices"][0]["logprobs"].is_null());

  Outcome status = Nightshift("status " + std::to_string(id) + " --json");
  ASSERT_EQ(status.code, 0) << status.err;
  json submission = json::parse(status.out);
  EXPECT_TRUE(submission["done"].get<bool>());
  EXPECT_EQ(submission["counts"]["failed"], "1");  // proto3 JSON: int64 as a string
  // Summed over the succeeded jobs: the failed one has no output.
  EXPECT_EQ(submission["prompt_tokens"]["jobs"], "3") << status.out;
}

TEST_F(CliEndToEndTest, StatusShowsThePromptTokensComputedOnceForSeveralJobs) {
  // One byte a token: the four prompts share their first 38 tokens.
  std::vector<json> input;
  for (int i = 1; i <= 4; ++i) {
    input.push_back(
        Completion("q" + std::to_string(i),
                   {{"prompt", "You are a careful assistant. Question " + std::to_string(i) + "?"},
                    {"max_tokens", 1}}));
  }
  const int64_t id = Submit(Write("shared.jsonl", input));
  ASSERT_GT(id, 0);
  ASSERT_EQ(Nightshift("watch " + std::to_string(id)).code, 0);

  Outcome results = Nightshift("results " + std::to_string(id));
  ASSERT_EQ(results.code, 0) << results.err;
  int64_t prompt_tokens = 0, cached = 0;
  for (const std::string& line : Lines(results.out)) {
    const json usage = json::parse(line)["response"]["body"]["usage"];
    EXPECT_EQ(usage["prompt_tokens"], 40);
    const int64_t n = usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    EXPECT_GE(n, 0);
    EXPECT_LE(n, 38);
    prompt_tokens += usage["prompt_tokens"].get<int64_t>();
    cached += n;
  }
  EXPECT_EQ(prompt_tokens, 160);
  EXPECT_GT(cached, 0) << "jobs submitted together start in one pass and share their prefix";

  Outcome status = Nightshift("status " + std::to_string(id) + " --json");
  ASSERT_EQ(status.code, 0) << status.err;
  const json sums = json::parse(status.out)["prompt_tokens"];
  EXPECT_EQ(sums["jobs"], "4") << status.out;
  EXPECT_EQ(sums["prompt_tokens"], "160");
  EXPECT_EQ(sums["cached_prompt_tokens"], std::to_string(cached));

  Outcome human = Nightshift("status " + std::to_string(id));
  ASSERT_EQ(human.code, 0) << human.err;
  const std::string line = "prompt tokens: 160, " + std::to_string(cached) +
                           " of them computed once for several jobs (" +
                           std::to_string(cached * 100 / 160) + "%)";
  EXPECT_NE(human.out.find(line + "\n"), std::string::npos) << human.out;
}

TEST_F(CliEndToEndTest, EveryMalformedLineIsListedAndNothingIsSubmitted) {
  Outcome run = Nightshift("submit " + DataPath("cli/invalid.jsonl"));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(run.out.empty()) << run.out;
  for (const char* expected :
       {"line 2: not valid JSON", "line 3: not a JSON object but a list",
        "line 4: custom_id is missing", "line 5: duplicate custom_id 'ok-1' (first on line 1)",
        "line 6: method is 'GET', not POST", "line 7: url '/v1/embeddings' is not supported",
        "line 8: max_tokens must be an integer, not a string",
        "line 9: temperature 3 is out of range [0, 2]",
        "line 10: /v1/chat/completions needs body.messages",
        "line 11: labels together with max_tokens"}) {
    EXPECT_NE(run.err.find(expected), std::string::npos) << expected << "\n" << run.err;
  }
  EXPECT_EQ(run.err.find("line 1:"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("nothing was submitted"), std::string::npos) << run.err;

  Outcome list = Nightshift("list --json --limit 0");
  ASSERT_EQ(list.code, 0) << list.err;
  // A valid document with no job at all: none reached the scheduler.
  EXPECT_EQ(json::parse(list.out, nullptr, false), json({{"jobs", json::array()}})) << list.out;
}

TEST_F(CliEndToEndTest, ModelOverridePriorityListWorkersEstimate) {
  const std::string file =
      Write("m.jsonl", {{{"custom_id", "a"},
                         {"method", "POST"},
                         {"url", "/v1/completions"},
                         {"body", {{"model", "not-served"}, {"prompt", "x"}, {"max_tokens", 1}}}}});
  const int64_t id = Submit(file, "--model tiny --priority 5");
  ASSERT_GT(id, 0);
  EXPECT_EQ(Nightshift("watch " + std::to_string(id)).code, 0);

  Outcome list = Nightshift("list --json --submission " + std::to_string(id));
  ASSERT_EQ(list.code, 0) << list.err;
  json listed = json::parse(list.out, nullptr, false);
  ASSERT_TRUE(listed.is_object()) << list.out;
  ASSERT_EQ(listed["jobs"].size(), 1u) << list.out;
  json job = listed["jobs"][0];
  EXPECT_EQ(job["model"], "tiny");
  EXPECT_EQ(job["priority"], 5);
  EXPECT_EQ(job["state"], "JOB_STATE_SUCCEEDED");
  Outcome table = Nightshift("list --submission " + std::to_string(id));
  ASSERT_EQ(Lines(table.out).size(), 2u) << table.out;
  EXPECT_NE(Lines(table.out)[1].find("SUCCEEDED"), std::string::npos) << table.out;

  Outcome workers = Nightshift("workers --json");
  ASSERT_EQ(workers.code, 0) << workers.err;
  json w = json::parse(workers.out);
  ASSERT_EQ(w["workers"].size(), 1u);
  EXPECT_EQ(w["workers"][0]["id"], "w1");
  EXPECT_TRUE(w["workers"][0]["connected"].get<bool>());
  EXPECT_NE(Nightshift("workers").out.find("w1"), std::string::npos);

  Outcome estimate = Nightshift("estimate tiny --jobs 10 --json");
  ASSERT_EQ(estimate.code, 0) << estimate.err;
  json e = json::parse(estimate.out);
  EXPECT_EQ(e["model"], "tiny");
  ASSERT_EQ(e["workers"].size(), 1u);
  EXPECT_EQ(e["workers"][0]["worker_id"], "w1");
  EXPECT_TRUE(e.contains("seconds")) << estimate.out;
}

TEST_F(CliEndToEndTest, LargeFilesGoInChunksOfOneSubmission) {
  std::vector<json> input;
  for (int i = 0; i < 5; ++i) {
    input.push_back(Completion("j" + std::to_string(i), {{"prompt", "x"}, {"max_tokens", 1}}));
  }
  const int64_t id = Submit(Write("five.jsonl", input), "--chunk-jobs 2");
  ASSERT_GT(id, 0);
  EXPECT_EQ(Nightshift("watch " + std::to_string(id)).code, 0);
  Outcome results = Nightshift("results " + std::to_string(id));
  ASSERT_EQ(results.code, 0) << results.err;
  std::vector<std::string> rows = Lines(results.out);
  ASSERT_EQ(rows.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(json::parse(rows[i])["custom_id"], "j" + std::to_string(i));
  }
}

TEST_F(CliEndToEndTest, CancelEndsWatchWithFailureAndResultsSayCancelled) {
  const int64_t id =
      Submit(Write("long.jsonl", {Completion("long", {{"prompt", "x"}, {"max_tokens", 4000}})}));
  ASSERT_GT(id, 0);
  Outcome early = Nightshift("results " + std::to_string(id) + " -o " + dir_.file("early.jsonl"));
  EXPECT_EQ(early.code, 1);
  EXPECT_NE(early.err.find("is not finished (0/1 jobs done)"), std::string::npos) << early.err;
  EXPECT_FALSE(std::ifstream(dir_.file("early.jsonl")).good());
  Outcome partial = Nightshift("results --partial " + std::to_string(id));
  EXPECT_EQ(partial.code, 0) << partial.err;
  EXPECT_EQ(partial.out, "");
  EXPECT_NE(partial.err.find("1 not finished, left out"), std::string::npos) << partial.err;

  Outcome cancel = Nightshift("cancel " + std::to_string(id) + " --json");
  ASSERT_EQ(cancel.code, 0) << cancel.err;
  EXPECT_EQ(json::parse(cancel.out)["id"], std::to_string(id)) << cancel.out;
  Outcome watch = Nightshift("watch " + std::to_string(id) + " --json");
  EXPECT_EQ(watch.code, 1);
  std::vector<std::string> events = Lines(watch.out);
  ASSERT_FALSE(events.empty());
  const json last = json::parse(events.back());
  EXPECT_TRUE(last["submission"]["done"].get<bool>()) << events.back();
  EXPECT_EQ(last["submission"]["counts"]["cancelled"], "1");

  // One job alone: cancel --job, then status --job shows it.
  const int64_t other =
      Submit(Write("one.jsonl", {Completion("one", {{"prompt", "x"}, {"max_tokens", 4000}})}));
  Outcome list = Nightshift("list --json --submission " + std::to_string(other));
  ASSERT_EQ(list.code, 0) << list.err;
  const std::string job_id = json::parse(list.out)["jobs"][0]["id"];
  EXPECT_EQ(Nightshift("cancel --job " + job_id).out, "job " + job_id + ": CANCELLED\n");
  Outcome status = Nightshift("status --job " + job_id + " --json");
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_EQ(json::parse(status.out)["state"], "JOB_STATE_CANCELLED");
  EXPECT_NE(Nightshift("status --job " + job_id).out.find("state:   CANCELLED"), std::string::npos);
  Outcome results = Nightshift("results " + std::to_string(id));
  ASSERT_EQ(results.code, 0) << results.err;
  json row = json::parse(results.out);
  EXPECT_EQ(row["custom_id"], "long");
  EXPECT_EQ(row["response"]["status_code"], 409);
  EXPECT_EQ(row["error"]["code"], "job_cancelled");
}

TEST_F(CliEndToEndTest, WatchDrawsABarOnATerminal) {
  // script(1) comes with bsdutils, which every Debian system has (Essential).
  ASSERT_EQ(access("/usr/bin/script", X_OK), 0) << "no /usr/bin/script to make a terminal";
  const int64_t id =
      Submit(Write("t.jsonl", {Completion("t", {{"prompt", "x"}, {"max_tokens", 5}})}));
  ASSERT_GT(id, 0);
  // script(1) runs the command on a pseudo-terminal and keeps its exit code.
  Outcome run = Shell(std::string(kCleanEnv) + " /usr/bin/script -qec '" + BinPath("nightshift") +
                      " watch " + std::to_string(id) + " --scheduler " + address_ + "' /dev/null");
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("\r[####################] 1/1 done"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\x1b[K"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("submission " + std::to_string(id) + " done: 1 succeeded"),
            std::string::npos)
      << run.out;
  EXPECT_EQ(run.out.find("submission " + std::to_string(id) + ": "), std::string::npos)
      << "no plain lines on a terminal:\n"
      << run.out;
}

TEST_F(CliEndToEndTest, WatchRidesOutASchedulerRestart) {
  const int64_t id =
      Submit(Write("r.jsonl", {Completion("r", {{"prompt", "x"}, {"max_tokens", 40}})}));
  ASSERT_GT(id, 0);
  setenv("NIGHTSHIFT_CONFIG", "/nonexistent", 1);
  auto watch = Process::Start({BinPath("nightshift"), "watch", std::to_string(id), "--scheduler",
                               address_, "--reconnect-seconds", "30"},
                              dir_.file("watch.log"));
  ASSERT_NE(watch, nullptr);
  ASSERT_FALSE(watch->WaitForLine("submission " + std::to_string(id) + ":", 10).empty());

  scheduler_->Signal(SIGKILL);
  scheduler_->Wait(10);
  const std::string address = address_;
  StartScheduler({}, address);  // same port, same database
  ASSERT_EQ(address_, address);
  auto worker = Process::Start(
      {BinPath("nightshift-fake-worker"), "--scheduler", address_, "--id", "w2", "--model", "tiny",
       "--tokenizer-dir", DataPath("scheduler/tiny-model"), "--pass-seconds", "0.05"},
      dir_.file("worker2.log"));
  ASSERT_NE(worker, nullptr);

  EXPECT_FALSE(
      watch->WaitForLine("submission " + std::to_string(id) + " done: 1 succeeded", 60).empty())
      << watch->Log();
  EXPECT_EQ(watch->Wait(10), 0) << watch->Log();
  EXPECT_NE(watch->Log().find("lost the scheduler"), std::string::npos) << watch->Log();
}

TEST_F(CliEndToEndTest, AModelNoWorkerServesIsALineErrorNamingTheKnownOnes) {
  const std::string file =
      Write("typo.jsonl", {Completion("fine", {{"prompt", "x"}, {"max_tokens", 1}}),
                           {{"custom_id", "typo"},
                            {"method", "POST"},
                            {"url", "/v1/completions"},
                            {"body", {{"model", "tinny"}, {"prompt", "x"}, {"max_tokens", 1}}}}});
  Outcome run = Nightshift("submit " + file);
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(run.err.find("line 2: model 'tinny' is served by no worker that has attached (known: "
                         "tiny)"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("line 1:"), std::string::npos) << run.err;
  Outcome list = Nightshift("list --json");
  EXPECT_EQ(json::parse(list.out, nullptr, false)["jobs"].size(), 0u) << list.out;
}

// Every line names a model no worker serves: the refusal names the first 50
// lines and counts them all, however many, and never breaks the transport
// (the whole list once rode in gRPC metadata: "received initial metadata
// size exceeds limit" at 300 lines).
TEST_F(CliEndToEndTest, ManyBadLinesAreCountedAndTheFirstNamedWhateverTheirNumber) {
  for (const int n : {300, 50'000}) {
    SCOPED_TRACE(n);
    const std::string path = dir_.file("many-" + std::to_string(n) + ".jsonl");
    {
      std::ofstream out(path);
      for (int i = 0; i < n; ++i) {
        out << json{{"custom_id", "c" + std::to_string(i)},
                    {"method", "POST"},
                    {"url", "/v1/completions"},
                    {"body", {{"model", "nobody"}, {"prompt", "x"}, {"max_tokens", 1}}}}
                   .dump()
            << "\n";
      }
    }
    Outcome run = Nightshift("submit " + path);
    EXPECT_EQ(run.code, 1);
    EXPECT_TRUE(run.out.empty()) << run.out;
    EXPECT_EQ(run.err.find("metadata"), std::string::npos) << run.err.substr(0, 2000);
    EXPECT_NE(run.err.find(std::to_string(n) + " bad lines; nothing was submitted"),
              std::string::npos)
        << run.err.substr(0, 2000);
    for (int line : {1, 2, 50}) {
      EXPECT_NE(run.err.find("\nline " + std::to_string(line) +
                             ": model 'nobody' is served by no worker that has attached (known: "
                             "tiny)"),
                std::string::npos)
          << line << "\n"
          << run.err.substr(0, 2000);
    }
    EXPECT_EQ(run.err.find("\nline 51:"), std::string::npos) << run.err.substr(0, 2000);
    EXPECT_NE(run.err.find("... and " + std::to_string(n - 50) + " more bad lines (" +
                           std::to_string(n) + " in all)"),
              std::string::npos)
        << run.err.substr(run.err.size() > 500 ? run.err.size() - 500 : 0);
    EXPECT_LT(run.err.size(), 32u << 10);
  }
  Outcome list = Nightshift("list --json");
  EXPECT_EQ(json::parse(list.out, nullptr, false)["jobs"].size(), 0u) << list.out;
}

// A format error, a model no worker serves and a prompt over the context:
// one refusal names all three (the local parse no longer stops before the
// scheduler's check, nor the scheduler's validation before tokenisation).
TEST_F(CliEndToEndTest, OneRefusalNamesFormatErrorsUnknownModelsAndLongPromptsTogether) {
  const std::string file = Write(
      "kinds.jsonl", {Completion("fine", {{"prompt", "x"}, {"max_tokens", 1}}),
                      Completion("hot", {{"prompt", "x"}, {"max_tokens", 1}, {"temperature", 3}}),
                      {{"custom_id", "typo"},
                       {"method", "POST"},
                       {"url", "/v1/completions"},
                       {"body", {{"model", "tinny"}, {"prompt", "x"}, {"max_tokens", 1}}}},
                      Completion("long", {{"prompt", "xyz"}, {"max_tokens", 4095}})});
  for (const char* extra : {"", " --chunk-jobs 1"}) {
    Outcome run = Nightshift("submit " + file + extra);
    EXPECT_EQ(run.code, 1);
    EXPECT_NE(run.err.find("3 bad lines; nothing was submitted"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("line 2: temperature 3 is out of range [0, 2]"), std::string::npos)
        << run.err;
    EXPECT_NE(run.err.find("line 3: model 'tinny' is served by no worker"), std::string::npos)
        << run.err;
    EXPECT_NE(run.err.find("line 4: prompt of "), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("exceeds the model's context of 4096 tokens"), std::string::npos)
        << run.err;
    EXPECT_EQ(run.err.find("line 1:"), std::string::npos) << run.err;
  }
  // Without the format error, the scheduler's refusal of a chunk names both of its kinds too.
  const std::string server_only = Write(
      "server-only.jsonl", {Completion("fine", {{"prompt", "x"}, {"max_tokens", 1}}),
                            {{"custom_id", "typo"},
                             {"method", "POST"},
                             {"url", "/v1/completions"},
                             {"body", {{"model", "tinny"}, {"prompt", "x"}, {"max_tokens", 1}}}},
                            Completion("long", {{"prompt", "xyz"}, {"max_tokens", 4095}})});
  Outcome run = Nightshift("submit " + server_only);
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(run.err.find("2 bad lines; nothing was submitted"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("line 2: model 'tinny'"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("line 3: prompt of "), std::string::npos) << run.err;
  Outcome list = Nightshift("list --json");
  EXPECT_EQ(json::parse(list.out, nullptr, false)["jobs"].size(), 0u) << list.out;
}

// A scheduler whose database lives on a tmpfs filled to its last KiB: a
// submission that does not fit is refused as a full disk (not as a file
// that changed), what was acknowledged before is all there, and the
// database is intact.
TEST_F(CliEndToEndTest, ASubmissionToAFullDiskIsRefusedAsSuchAndLosesNothingAcknowledged) {
  std::string why;
  auto fs = testutil::TinyFilesystem::Mount(16 << 20, &why);
  if (fs == nullptr) GTEST_SKIP() << why;
  std::vector<std::string> argv = testutil::SchedulerArgv(fs->file("ns.db"), "2", "0.2");
  argv.push_back("--allow-unknown-models");
  auto scheduler = Process::Start(argv, dir_.file("full-scheduler.log"));
  ASSERT_NE(scheduler, nullptr);
  const std::string address = testutil::WaitForListenAddress(*scheduler, 20);
  ASSERT_FALSE(address.empty()) << scheduler->Log();
  const auto submit = [&](const std::string& file, const std::string& extra) {
    return Shell(std::string(kCleanEnv) + " " + BinPath("nightshift") + " submit " + file +
                 " --json --scheduler " + address + " " + extra);
  };
  std::vector<json> first;
  for (int i = 0; i < 20; ++i) {
    first.push_back(Completion("a" + std::to_string(i), {{"prompt", "x"}, {"max_tokens", 1}}));
  }
  Outcome acknowledged = submit(Write("a.jsonl", first), "");
  ASSERT_EQ(acknowledged.code, 0) << acknowledged.err << scheduler->Log();
  const int64_t id = json::parse(acknowledged.out)["submission_id"].get<int64_t>();

  ASSERT_TRUE(fs->Fill(64 << 10)) << fs->FreeBytes();
  std::vector<json> big;
  for (int i = 0; i < 2000; ++i) {
    big.push_back(Completion("b" + std::to_string(i),
                             {{"prompt", std::string(1000, 'y')}, {"max_tokens", 1}}));
  }
  Outcome full = submit(Write("b.jsonl", big), "--chunk-jobs 200");
  EXPECT_EQ(full.code, 1);
  EXPECT_TRUE(full.out.empty()) << full.out;
  EXPECT_NE(full.err.find("b.jsonl: nothing was submitted: the scheduler's disk is full: "),
            std::string::npos)
      << full.err;
  EXPECT_EQ(full.err.find("changed while"), std::string::npos) << full.err;
  EXPECT_NE(scheduler->Log().find("nightshift-scheduler: the scheduler's disk is full: "),
            std::string::npos)
      << scheduler->Log();

  Outcome status = Shell(std::string(kCleanEnv) + " " + BinPath("nightshift") + " status " +
                         std::to_string(id) + " --json --scheduler " + address);
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_EQ(json::parse(status.out)["counts"]["total"], "20") << status.out;

  scheduler->Signal(SIGKILL);
  scheduler->Wait(10);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(fs->file("ns.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  const auto one = [&](const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    std::string value = "(error)";
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return value;
  };
  EXPECT_EQ(one("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(one("SELECT COUNT(*) FROM jobs WHERE submission_id = " + std::to_string(id)), "20");
  // Nothing of the refused file can run: any chunk of it that was stored is
  // in a submission never sealed, or cancelled.
  EXPECT_EQ(one("SELECT COUNT(*) FROM jobs j JOIN submissions s ON s.id = j.submission_id "
                "WHERE j.submission_id != " +
                std::to_string(id) + " AND s.sealed = 1 AND j.state != 'cancelled'"),
            "0");
  sqlite3_close(db);
}

TEST_F(CliEndToEndTest, ListWithManyPagesIsOneDocumentAndAFailedListPrintsNoHeader) {
  std::vector<json> input;
  for (int i = 0; i < 3; ++i) {
    input.push_back(Completion("j" + std::to_string(i), {{"prompt", "x"}, {"max_tokens", 1}}));
  }
  const int64_t id = Submit(Write("three.jsonl", input));
  ASSERT_GT(id, 0);
  Outcome list = Nightshift("list --json --limit 0 --submission batch_" + std::to_string(id));
  ASSERT_EQ(list.code, 0) << list.err;
  json listed = json::parse(list.out, nullptr, false);
  ASSERT_TRUE(listed.is_object()) << list.out;
  ASSERT_EQ(listed["jobs"].size(), 3u);
  EXPECT_EQ(listed["jobs"][2]["custom_id"], "j2");

  scheduler_->Signal(SIGKILL);
  scheduler_->Wait(10);
  Outcome table = Nightshift("list");
  EXPECT_EQ(table.code, 1);
  EXPECT_EQ(table.out, "") << "no header before the error";
  EXPECT_NE(table.err.find("nightshift list: listing jobs:"), std::string::npos) << table.err;
}

TEST_F(CliEndToEndTest, BatchIdsNameTheSameSubmission) {
  const int64_t id =
      Submit(Write("one.jsonl", {Completion("a", {{"prompt", "x"}, {"max_tokens", 1}})}));
  ASSERT_GT(id, 0);
  const std::string batch = "batch_" + std::to_string(id);
  EXPECT_EQ(Nightshift("watch " + batch).code, 0);
  Outcome by_batch = Nightshift("status " + batch + " --json");
  Outcome by_id = Nightshift("status " + std::to_string(id) + " --json");
  ASSERT_EQ(by_batch.code, 0) << by_batch.err;
  EXPECT_EQ(json::parse(by_batch.out)["id"], json::parse(by_id.out)["id"]);
  const std::string out_file = dir_.file("batch-out.jsonl");
  ASSERT_EQ(Nightshift("results " + batch + " -o " + out_file).code, 0);
  EXPECT_EQ(Lines(ReadFile(out_file)).size(), 1u);
  EXPECT_EQ(Nightshift("status batch_x").code, 2);
  EXPECT_EQ(Nightshift("status batch_").code, 2);
}

TEST_F(CliEndToEndTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Nightshift("watch not-a-number").code, 2);
  EXPECT_EQ(Nightshift("submit").code, 2);
  EXPECT_EQ(Nightshift("list --state sleeping").code, 2);
  EXPECT_EQ(Nightshift("status 999").code, 1);  // the scheduler says NOT_FOUND
}

// A scheduler with TLS and a client token (no worker: none is needed to
// list jobs or estimate).
class CliSecureTest : public CliEndToEndTest {
 protected:
  void SetUp() override {
    StartScheduler({"--tls-cert", tls_ + "cert.pem", "--tls-key", tls_ + "key.pem",
                    "--client-token", "secret", "--worker-token", "w"});
  }
  const std::string tls_ = DataPath("scheduler/tls/");
};

TEST_F(CliSecureTest, TokenFromFlagEnvironmentOrConfigFileAndTls) {
  const std::string ca = " --tls-ca " + tls_ + "cert.pem";
  Outcome none = Nightshift("list" + ca);
  EXPECT_EQ(none.code, 1);
  EXPECT_EQ(none.err.rfind("nightshift list: listing jobs: ", 0), 0u) << none.err;
  EXPECT_EQ(Nightshift("list --token wrong" + ca).code, 1);
  Outcome flag = Nightshift("list --token secret" + ca);
  EXPECT_EQ(flag.code, 0) << flag.err;
  EXPECT_EQ(Nightshift("list --token secret").code, 1);  // plaintext to a TLS port
  Outcome env = Nightshift("list" + ca, "NIGHTSHIFT_CONFIG=/nonexistent NIGHTSHIFT_TOKEN=secret");
  EXPECT_EQ(env.code, 0) << env.err;

  std::ofstream(dir_.file("config.toml"))
      << "# test\nscheduler = \"" << address_ << "\"\ntoken = \"secret\"\ntls_ca = \"" << tls_
      << "cert.pem\"\n";
  Outcome config =
      Nightshift("list --json", "NIGHTSHIFT_TOKEN= NIGHTSHIFT_CONFIG=" + dir_.file("config.toml"),
                 /*with_address=*/false);
  EXPECT_EQ(config.code, 0) << config.err;
  std::ofstream(dir_.file("config.toml"), std::ios::app) << "token = \"wrong\"\n";
  EXPECT_EQ(
      Nightshift("list --json", "NIGHTSHIFT_TOKEN= NIGHTSHIFT_CONFIG=" + dir_.file("config.toml"),
                 /*with_address=*/false)
          .code,
      1);
}

}  // namespace
}  // namespace nightshift::cli
