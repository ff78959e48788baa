#include "proto/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace nightshift::api::wire {
namespace {

// Every field of `message`'s type is set in it: a converter that forgets a
// field added to the proto fails here (every test fills each field with a
// value that is not the proto default).
void ExpectEveryFieldSet(const google::protobuf::Message& message) {
  const google::protobuf::Descriptor* type = message.GetDescriptor();
  std::vector<const google::protobuf::FieldDescriptor*> set;
  message.GetReflection()->ListFields(message, &set);
  for (int i = 0; i < type->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = type->field(i);
    EXPECT_NE(std::find(set.begin(), set.end(), field), set.end())
        << type->name() << "." << field->name() << " is not converted";
  }
}

TEST(ApiWireTest, SamplingTakesTheApiDefaultsForUnsetFields) {
  const Sampling unset = FromProto(v1::Sampling());
  EXPECT_EQ(unset.temperature, 1.0);
  EXPECT_EQ(unset.top_p, 1.0);
  EXPECT_EQ(unset.top_k, 0);
  EXPECT_FALSE(unset.has_seed);

  Sampling s{0.0, 0.5, 7, true, 42};
  v1::Sampling wire;
  ToProto(s, &wire);
  ExpectEveryFieldSet(wire);
  const Sampling back = FromProto(wire);
  EXPECT_EQ(back.temperature, 0.0);  // set to 0: greedy, not the default
  EXPECT_EQ(back.top_p, 0.5);
  EXPECT_EQ(back.top_k, 7);
  EXPECT_TRUE(back.has_seed);
  EXPECT_EQ(back.seed, 42u);
}

TEST(ApiWireTest, JobOutputRoundTrips) {
  JobOutput o;
  o.text = "hi";
  o.token_ids = {1, 2};
  o.finish_reason = "stop";
  o.prompt_tokens = 7;
  o.completion_tokens = 2;
  o.cached_prompt_tokens = 5;
  o.logprobs = {{1, "h", -0.5, {{1, "h", -0.5}, {3, "x", -2}}}};
  o.labels = {{" yes", -0.1}};
  v1::JobOutput wire;
  ToProto(o, &wire);
  ExpectEveryFieldSet(wire);
  ExpectEveryFieldSet(wire.logprobs(0));
  ExpectEveryFieldSet(wire.logprobs(0).top(1));
  ExpectEveryFieldSet(wire.labels(0));
  const JobOutput back = FromProto(wire);
  EXPECT_EQ(back.text, "hi");
  EXPECT_EQ(back.token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(back.finish_reason, "stop");
  EXPECT_EQ(back.prompt_tokens, 7);
  EXPECT_EQ(back.completion_tokens, 2);
  EXPECT_EQ(back.cached_prompt_tokens, 5);
  EXPECT_EQ(wire.cached_prompt_tokens(), 5);
  ASSERT_EQ(back.logprobs.size(), 1u);
  EXPECT_EQ(back.logprobs[0].token, 1);
  EXPECT_EQ(back.logprobs[0].text, "h");
  EXPECT_EQ(back.logprobs[0].logprob, -0.5);
  ASSERT_EQ(back.logprobs[0].top.size(), 2u);
  EXPECT_EQ(back.logprobs[0].top[1].token, 3);
  EXPECT_EQ(back.logprobs[0].top[1].text, "x");
  EXPECT_EQ(back.logprobs[0].top[1].logprob, -2);
  ASSERT_EQ(back.labels.size(), 1u);
  EXPECT_EQ(back.labels[0].label, " yes");
  EXPECT_EQ(back.labels[0].logprob, -0.1);
}

TEST(ApiWireTest, WorkerHelloRoundTripsWithItsModels) {
  WorkerHello hello;
  hello.running_batches = {3};
  hello.version = "0.1.0";
  WorkerInfo& info = hello.info;
  info.id = "w1";
  info.device = "cuda:0";
  info.memory_budget_bytes = 8 << 20;
  info.kv_budget_bytes = 2 << 20;
  info.read_bytes_per_second = 1.5e9;
  info.max_batch_jobs = 12;
  info.open_model = "m";
  info.cgroup_memory_limit_bytes = 1 << 30;
  info.models.push_back({"m", 4096, 1'000'000, 0.75, 2048, "abc", 6000, "read failed"});
  v1::WorkerHello wire;
  ToProto(hello, &wire);
  ExpectEveryFieldSet(wire);
  ExpectEveryFieldSet(wire.models(0));
  const WorkerHello got = FromProto(wire);
  EXPECT_EQ(got.running_batches, std::vector<int64_t>{3});
  EXPECT_EQ(got.version, "0.1.0");
  const WorkerInfo& back = got.info;
  EXPECT_EQ(back.id, "w1");
  EXPECT_EQ(back.device, "cuda:0");
  EXPECT_EQ(back.memory_budget_bytes, 8 << 20);
  EXPECT_EQ(back.kv_budget_bytes, 2 << 20);
  EXPECT_EQ(back.read_bytes_per_second, 1.5e9);
  EXPECT_EQ(back.max_batch_jobs, 12);
  EXPECT_EQ(back.open_model, "m");
  EXPECT_EQ(back.cgroup_memory_limit_bytes, 1 << 30);
  ASSERT_EQ(back.models.size(), 1u);
  const ModelOffer& m = back.models[0];
  EXPECT_EQ(m.name, "m");
  EXPECT_EQ(m.kv_bytes_per_token, 4096);
  EXPECT_EQ(m.checkpoint_bytes, 1'000'000);
  EXPECT_EQ(m.seconds_per_pass, 0.75);
  EXPECT_EQ(m.max_context_tokens, 2048);
  EXPECT_EQ(m.tokenizer_hash, "abc");
  EXPECT_EQ(m.pass_token_budget, 6000);
  EXPECT_EQ(m.unhealthy, "read failed");
}

TEST(ApiWireTest, PassProgressRoundTrips) {
  PassProgress p;
  p.batch_id = 4;
  p.pass_index = 2;
  p.seconds = 0.8;
  p.bytes_read = 1000;
  p.io_wait_seconds = 0.1;
  p.sequences = 3;
  p.tokens = 30;
  p.mode = "streaming";
  p.generated = {{7, 2}, {8, 3}};
  p.free_kv_bytes = 512;
  p.want_top_up = true;
  p.free_pass_tokens = 900;
  p.experts_total = 256;
  p.experts_read = 40;
  p.kept_prefixes = {{5, 6, 7}, {9}};
  v1::PassReport wire;
  ToProto(p, &wire);
  ExpectEveryFieldSet(wire);
  const PassProgress back = FromProto(wire);
  EXPECT_EQ(back.batch_id, 4);
  EXPECT_EQ(back.pass_index, 2);
  EXPECT_EQ(back.seconds, 0.8);
  EXPECT_EQ(back.bytes_read, 1000);
  EXPECT_EQ(back.io_wait_seconds, 0.1);
  EXPECT_EQ(back.sequences, 3);
  EXPECT_EQ(back.tokens, 30);
  EXPECT_EQ(back.mode, "streaming");
  EXPECT_EQ(back.experts_total, 256);
  EXPECT_EQ(back.experts_read, 40);
  EXPECT_EQ(back.kept_prefixes, (std::vector<std::vector<int32_t>>{{5, 6, 7}, {9}}));
  EXPECT_EQ(back.generated, (std::map<int64_t, int64_t>{{7, 2}, {8, 3}}));
  EXPECT_EQ(back.free_kv_bytes, 512);
  EXPECT_TRUE(back.want_top_up);
  EXPECT_EQ(back.free_pass_tokens, 900);
}

TEST(ApiWireTest, TokenizerFilesRoundTripAndKeepTheirHash) {
  TokenizerFiles files;
  files.files = {{"tokenizer.json", "{}"}, {"tokenizer_config.json", "{\"a\":1}"}};
  files.eos_ids = {2, 7};
  v1::TokenizerUpload wire;
  ToProto(files, &wire);
  ExpectEveryFieldSet(wire);
  const TokenizerFiles back = FromProto(wire);
  EXPECT_EQ(back.files, files.files);
  EXPECT_EQ(back.eos_ids, files.eos_ids);
  EXPECT_EQ(TokenizerHash(back), TokenizerHash(files));
  files.eos_ids = {2};
  EXPECT_NE(TokenizerHash(back), TokenizerHash(files));
}

}  // namespace
}  // namespace nightshift::api::wire
