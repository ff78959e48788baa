#include "scheduler/codec.h"

#include <gtest/gtest.h>

namespace nightshift::scheduler {
namespace {

TEST(CodecTest, SpecRoundTrips) {
  JobSpec spec;
  spec.custom_id = "req-1";
  spec.model = "llama";
  spec.endpoint = Endpoint::kChatCompletions;
  spec.prompt_kind = PromptKind::kChat;
  spec.messages = {{"system", "be brief"}, {"user", "hi \xc3\xa9"}};
  spec.max_new_tokens = 7;
  spec.sampling = {0.5, 0.9, 40, true, 18446744073709551615ull};
  spec.stop = {"\n", "###"};
  spec.labels = {"yes", "no"};
  spec.logprobs = true;
  spec.top_logprobs = 3;
  spec.priority = -2;
  auto back = SpecFromJson(SpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(SpecToJson(*back), SpecToJson(spec));
  EXPECT_EQ(back->sampling.seed, spec.sampling.seed);
  EXPECT_EQ(back->messages[1].content, "hi \xc3\xa9");
  EXPECT_EQ(back->prompt_kind, PromptKind::kChat);
}

TEST(CodecTest, SpecWithoutSeedStaysWithoutSeed) {
  JobSpec spec;
  spec.prompt_kind = PromptKind::kTokenIds;
  spec.prompt_token_ids = {5, 6};
  auto back = SpecFromJson(SpecToJson(spec));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->sampling.has_seed);
  EXPECT_EQ(back->prompt_token_ids, (std::vector<int32_t>{5, 6}));
}

TEST(CodecTest, MalformedSpecIsDataLoss) {
  auto json = SpecToJson(JobSpec{});
  json.erase("model");
  EXPECT_EQ(SpecFromJson(json).status().code(), StatusCode::kDataLoss);
  json = SpecToJson(JobSpec{});
  json["url"] = "/v1/embeddings";
  EXPECT_EQ(SpecFromJson(json).status().code(), StatusCode::kDataLoss);
}

TEST(CodecTest, OutputRoundTrips) {
  JobOutput output;
  output.text = "Paris";
  output.token_ids = {11, 12};
  output.finish_reason = "stop";
  output.prompt_tokens = 9;
  output.completion_tokens = 2;
  output.cached_prompt_tokens = 6;
  output.logprobs = {{11, "Par", -0.5, {{11, "Par", -0.5}, {13, "Lon", -1.5}}}};
  output.labels = {{"yes", -0.1}, {"no", -2.4}};
  auto back = OutputFromJson(OutputToJson(output));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(OutputToJson(*back), OutputToJson(output));
  EXPECT_EQ(back->logprobs[0].top[1].text, "Lon");
  EXPECT_EQ(back->cached_prompt_tokens, 6);
  EXPECT_EQ(OutputToJson(output)["cached_prompt_tokens"], 6);
}

TEST(CodecTest, AnOutputStoredBeforeCachedPromptTokensReadsAsNoneCached) {
  // A results row as an older scheduler wrote it: no cached_prompt_tokens.
  const nlohmann::json old_row = nlohmann::json::parse(
      R"({"text":"Paris","token_ids":[11,12],"finish_reason":"stop","prompt_tokens":9,)"
      R"("completion_tokens":2,"logprobs":[],"labels":[]})");
  auto back = OutputFromJson(old_row);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->prompt_tokens, 9);
  EXPECT_EQ(back->cached_prompt_tokens, 0);
  EXPECT_EQ(back->text, "Paris");
}

TEST(CodecTest, TokensPackLittleEndianAndRoundTrip) {
  const std::vector<int32_t> ids = {0, 1, 256, -1, 2147483647};
  const std::string blob = PackTokens(ids);
  ASSERT_EQ(blob.size(), 20u);
  EXPECT_EQ(blob.substr(8, 4), std::string("\x00\x01\x00\x00", 4));
  auto back = UnpackTokens(blob);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, ids);
  EXPECT_EQ(UnpackTokens("abc").status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace nightshift::scheduler
