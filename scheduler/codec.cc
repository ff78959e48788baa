#include "scheduler/codec.h"

#include <cstring>

namespace nightshift::scheduler {

using nlohmann::json;

namespace {

const char* PromptKindName(PromptKind kind) {
  switch (kind) {
    case PromptKind::kText:
      return "text";
    case PromptKind::kChat:
      return "chat";
    case PromptKind::kTokenIds:
      return "token_ids";
  }
  return "?";
}

StatusOr<PromptKind> ParsePromptKind(const std::string& name) {
  for (PromptKind kind : {PromptKind::kText, PromptKind::kChat, PromptKind::kTokenIds}) {
    if (name == PromptKindName(kind)) return kind;
  }
  return DataLoss("stored job spec: unknown prompt kind '" + name + "'");
}

// Runs `read` and turns nlohmann's type/key exceptions into DataLoss.
template <typename Fn>
auto Guard(const char* what, Fn read) -> StatusOr<decltype(read())> {
  try {
    return read();
  } catch (const json::exception& e) {
    return DataLoss(std::string("stored ") + what + ": " + e.what());
  }
}

}  // namespace

json SpecToJson(const JobSpec& spec) {
  json messages = json::array();
  for (const auto& m : spec.messages)
    messages.push_back({{"role", m.role}, {"content", m.content}});
  json sampling = {{"temperature", spec.sampling.temperature},
                   {"top_p", spec.sampling.top_p},
                   {"top_k", spec.sampling.top_k}};
  if (spec.sampling.has_seed) sampling["seed"] = spec.sampling.seed;
  return {{"custom_id", spec.custom_id},
          {"model", spec.model},
          {"url", EndpointUrl(spec.endpoint)},
          {"prompt_kind", PromptKindName(spec.prompt_kind)},
          {"prompt_text", spec.prompt_text},
          {"messages", messages},
          {"prompt_token_ids", spec.prompt_token_ids},
          {"max_new_tokens", spec.max_new_tokens},
          {"sampling", sampling},
          {"stop", spec.stop},
          {"labels", spec.labels},
          {"logprobs", spec.logprobs},
          {"top_logprobs", spec.top_logprobs},
          {"priority", spec.priority}};
}

StatusOr<JobSpec> SpecFromJson(const json& j) {
  auto spec = Guard("job spec", [&] {
    JobSpec s;
    s.custom_id = j.at("custom_id").get<std::string>();
    s.model = j.at("model").get<std::string>();
    s.prompt_text = j.at("prompt_text").get<std::string>();
    for (const auto& m : j.at("messages")) {
      s.messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    s.prompt_token_ids = j.at("prompt_token_ids").get<std::vector<int32_t>>();
    s.max_new_tokens = j.at("max_new_tokens").get<int32_t>();
    const json& sampling = j.at("sampling");
    s.sampling.temperature = sampling.at("temperature").get<double>();
    s.sampling.top_p = sampling.at("top_p").get<double>();
    s.sampling.top_k = sampling.at("top_k").get<int32_t>();
    s.sampling.has_seed = sampling.contains("seed");
    if (s.sampling.has_seed) s.sampling.seed = sampling.at("seed").get<uint64_t>();
    s.stop = j.at("stop").get<std::vector<std::string>>();
    s.labels = j.at("labels").get<std::vector<std::string>>();
    s.logprobs = j.at("logprobs").get<bool>();
    s.top_logprobs = j.at("top_logprobs").get<int32_t>();
    s.priority = j.at("priority").get<int32_t>();
    return s;
  });
  if (!spec.ok()) return spec.status();
  auto url = Guard("job spec", [&] { return j.at("url").get<std::string>(); });
  auto kind = Guard("job spec", [&] { return j.at("prompt_kind").get<std::string>(); });
  if (!url.ok()) return url.status();
  if (!kind.ok()) return kind.status();
  auto endpoint = ParseEndpointUrl(*url);
  if (!endpoint.ok()) return DataLoss("stored job spec: " + endpoint.status().message());
  spec->endpoint = *endpoint;
  NS_ASSIGN_OR_RETURN(spec->prompt_kind, ParsePromptKind(*kind));
  return spec;
}

json OutputToJson(const JobOutput& output) {
  json logprobs = json::array();
  for (const auto& lp : output.logprobs) {
    json top = json::array();
    for (const auto& t : lp.top)
      top.push_back({{"token", t.token}, {"text", t.text}, {"logprob", t.logprob}});
    logprobs.push_back(
        {{"token", lp.token}, {"text", lp.text}, {"logprob", lp.logprob}, {"top", top}});
  }
  json labels = json::array();
  for (const auto& l : output.labels)
    labels.push_back({{"label", l.label}, {"logprob", l.logprob}});
  return {{"text", output.text},
          {"token_ids", output.token_ids},
          {"finish_reason", output.finish_reason},
          {"prompt_tokens", output.prompt_tokens},
          {"completion_tokens", output.completion_tokens},
          {"cached_prompt_tokens", output.cached_prompt_tokens},
          {"logprobs", logprobs},
          {"labels", labels}};
}

StatusOr<JobOutput> OutputFromJson(const json& j) {
  return Guard("job output", [&] {
    JobOutput o;
    o.text = j.at("text").get<std::string>();
    o.token_ids = j.at("token_ids").get<std::vector<int32_t>>();
    o.finish_reason = j.at("finish_reason").get<std::string>();
    o.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
    o.completion_tokens = j.at("completion_tokens").get<int64_t>();
    // Absent from rows stored before it existed.
    o.cached_prompt_tokens = j.value("cached_prompt_tokens", int64_t{0});
    for (const auto& lp : j.at("logprobs")) {
      TokenLogprob token{lp.at("token").get<int32_t>(),
                         lp.at("text").get<std::string>(),
                         lp.at("logprob").get<double>(),
                         {}};
      for (const auto& t : lp.at("top")) {
        token.top.push_back({t.at("token").get<int32_t>(), t.at("text").get<std::string>(),
                             t.at("logprob").get<double>()});
      }
      o.logprobs.push_back(std::move(token));
    }
    for (const auto& l : j.at("labels")) {
      o.labels.push_back({l.at("label").get<std::string>(), l.at("logprob").get<double>()});
    }
    return o;
  });
}

std::string PackTokens(const std::vector<int32_t>& ids) {
  std::string blob(ids.size() * 4, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    for (int b = 0; b < 4; ++b) blob[i * 4 + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
  return blob;
}

StatusOr<std::vector<int32_t>> UnpackTokens(std::string_view blob) {
  if (blob.size() % 4 != 0) {
    return DataLoss("stored token ids: " + std::to_string(blob.size()) +
                    " bytes is not a multiple of 4");
  }
  std::vector<int32_t> ids(blob.size() / 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b)
      v |= static_cast<uint32_t>(static_cast<uint8_t>(blob[i * 4 + b])) << (8 * b);
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

StatusOr<json> ParseStoredJson(const std::string& text, const char* what) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return DataLoss(std::string("stored ") + what + " is not valid JSON");
  return parsed;
}

}  // namespace nightshift::scheduler
