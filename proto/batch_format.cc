#include "proto/batch_format.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

namespace nightshift::api {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxTokens = 1 << 20;
constexpr int64_t kMaxTopLogprobs = 20;
constexpr size_t kMaxStop = 4;
constexpr size_t kMaxLabels = 64;

const char* TypeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a fractional number";
    default:
      return "an integer";
  }
}

std::string Shown(const json& value) {
  std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

std::string Decimal(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

// Collects one line's problems.
class Line {
 public:
  Line(int64_t number, std::vector<LineError>* errors) : number_(number), errors_(errors) {}

  void Bad(std::string reason) {
    errors_->push_back({number_, std::move(reason)});
    ok_ = false;
  }
  void WrongType(const std::string& field, const char* wanted, const json& value) {
    Bad(field + " must be " + wanted + ", not " + TypeName(value));
  }
  bool ok() const { return ok_; }

 private:
  int64_t number_;
  std::vector<LineError>* errors_;
  bool ok_ = true;
};

// `object[key]` when present and not null.
const json* Field(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::optional<std::string> String(const json& object, const char* key, Line& line) {
  const json* value = Field(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) {
    line.WrongType(key, "a string", *value);
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<int64_t> Integer(const json& object, const char* key, int64_t low, int64_t high,
                               Line& line) {
  const json* value = Field(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number_integer()) {
    line.WrongType(key, "an integer", *value);
    return std::nullopt;
  }
  const bool too_big = value->is_number_unsigned() && value->get<uint64_t>() > INT64_MAX;
  const int64_t number = too_big ? INT64_MAX : value->get<int64_t>();
  if (too_big || number < low || number > high) {
    line.Bad(std::string(key) + " " + Shown(*value) + " is out of range [" + std::to_string(low) +
             ", " + std::to_string(high) + "]");
    return std::nullopt;
  }
  return number;
}

// A number in [low, high], or in (low, high] when `open_low`.
std::optional<double> Number(const json& object, const char* key, double low, double high,
                             bool open_low, Line& line) {
  const json* value = Field(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    line.WrongType(key, "a number", *value);
    return std::nullopt;
  }
  const double number = value->get<double>();
  if (number < low || number > high || (open_low && number == low)) {
    line.Bad(std::string(key) + " " + Shown(*value) + " is out of range " + (open_low ? "(" : "[") +
             Decimal(low) + ", " + Decimal(high) + "]");
    return std::nullopt;
  }
  return number;
}

std::optional<bool> Boolean(const json& object, const char* key, Line& line) {
  const json* value = Field(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) {
    line.WrongType(key, "a boolean", *value);
    return std::nullopt;
  }
  return value->get<bool>();
}

// A list of strings, each non-empty; `key` names it in messages.
std::optional<std::vector<std::string>> StringList(const json& value, const std::string& key,
                                                   Line& line) {
  if (!value.is_array()) {
    line.WrongType(key, "a list of strings", value);
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (const json& item : value) {
    if (!item.is_string()) {
      line.WrongType(key + " items", "strings", item);
      return std::nullopt;
    }
    if (item.get_ref<const std::string&>().empty()) {
      line.Bad(key + " holds an empty string");
      return std::nullopt;
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

void RefuseUnknown(const json& object, const std::set<std::string>& known, const std::string& where,
                   const BatchInputOptions& options, Line& line) {
  if (!options.strict) return;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (known.count(it.key()) == 0) line.Bad("unknown field " + where + it.key());
  }
}

void ParsePrompt(const json& body, Line& line, JobSpec* job) {
  const json* prompt = Field(body, "prompt");
  if (prompt == nullptr) {
    line.Bad("/v1/completions needs body.prompt");
    return;
  }
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) line.Bad("prompt is empty");
    job->prompt_kind = PromptKind::kText;
    job->prompt_text = prompt->get<std::string>();
    return;
  }
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    job->prompt_kind = PromptKind::kText;
    job->prompt_text = (*prompt)[0].get<std::string>();
    if (job->prompt_text.empty()) line.Bad("prompt is empty");
    return;
  }
  if (!prompt->is_array() || prompt->empty()) {
    line.Bad(std::string("prompt must be a string or a list of token ids, not ") +
             (prompt->is_array() ? "an empty list" : TypeName(*prompt)));
    return;
  }
  if ((*prompt)[0].is_string()) {
    line.Bad("prompt holds " + std::to_string(prompt->size()) +
             " strings; give one prompt per line");
    return;
  }
  job->prompt_kind = PromptKind::kTokenIds;
  for (const json& id : *prompt) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      line.Bad("prompt token id " + Shown(id) + " is not a token id");
      return;
    }
    job->prompt_token_ids.push_back(id.get<int32_t>());
  }
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts.
std::optional<std::string> MessageContent(const json& message, const std::string& where,
                                          Line& line) {
  const json* content = Field(message, "content");
  if (content == nullptr) return std::string();
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) {
    line.WrongType(where + ".content", "a string or a list of text parts", *content);
    return std::nullopt;
  }
  std::string text;
  for (const json& part : *content) {
    const json* type = part.is_object() ? Field(part, "type") : nullptr;
    const json* part_text = part.is_object() ? Field(part, "text") : nullptr;
    if (type == nullptr || *type != "text" || part_text == nullptr || !part_text->is_string()) {
      line.Bad(where + ".content: only {\"type\": \"text\", \"text\": ...} parts are supported");
      return std::nullopt;
    }
    text += part_text->get<std::string>();
  }
  return text;
}

void ParseMessages(const json& body, const BatchInputOptions& options, Line& line, JobSpec* job) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr) {
    line.Bad("/v1/chat/completions needs body.messages");
    return;
  }
  if (!messages->is_array() || messages->empty()) {
    line.Bad(std::string("messages must be a non-empty list, not ") +
             (messages->is_array() ? "an empty one" : TypeName(*messages)));
    return;
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) {
      line.WrongType(where, "an object", message);
      continue;
    }
    RefuseUnknown(message, {"role", "content", "name"}, where + ".", options, line);
    std::optional<std::string> role = String(message, "role", line);
    if (!role.has_value() || role->empty()) line.Bad(where + " has no role");
    std::optional<std::string> content = MessageContent(message, where, line);
    job->messages.push_back({role.value_or(""), content.value_or("")});
  }
}

void ParseLogprobs(const json& body, bool chat, Line& line, JobSpec* job) {
  const json* logprobs = Field(body, "logprobs");
  if (logprobs != nullptr && logprobs->is_boolean()) {
    job->logprobs = logprobs->get<bool>();
  } else if (logprobs != nullptr && !chat) {
    // Legacy completions: logprobs N asks for the N most likely tokens.
    if (std::optional<int64_t> n = Integer(body, "logprobs", 0, kMaxTopLogprobs, line)) {
      job->logprobs = true;
      job->top_logprobs = static_cast<int32_t>(*n);
    }
  } else if (logprobs != nullptr) {
    line.WrongType("logprobs", "a boolean", *logprobs);
  }
  if (std::optional<int64_t> top = Integer(body, "top_logprobs", 0, kMaxTopLogprobs, line)) {
    if (!job->logprobs) line.Bad("top_logprobs needs logprobs: true");
    job->top_logprobs = static_cast<int32_t>(*top);
  }
}

void ParseStop(const json& body, Line& line, JobSpec* job) {
  const json* stop = Field(body, "stop");
  if (stop == nullptr) return;
  std::optional<std::vector<std::string>> list =
      stop->is_string() ? std::vector<std::string>{stop->get<std::string>()}
                        : StringList(*stop, "stop", line);
  if (!list.has_value()) return;
  if (list->size() > kMaxStop) {
    line.Bad(std::to_string(list->size()) + " stop strings; at most " + std::to_string(kMaxStop));
  }
  for (const std::string& s : *list) {
    if (s.empty()) line.Bad("a stop string is empty");
    job->stop.push_back(s);
  }
}

void ParseLabels(const json& body, Line& line, JobSpec* job) {
  const json* labels = Field(body, "labels");
  if (labels == nullptr) return;
  std::optional<std::vector<std::string>> list = StringList(*labels, "labels", line);
  if (!list.has_value()) return;
  if (list->empty()) line.Bad("labels is an empty list");
  if (list->size() > kMaxLabels) {
    line.Bad(std::to_string(list->size()) + " labels; at most " + std::to_string(kMaxLabels));
  }
  std::set<std::string> seen;
  for (const std::string& label : *list) {
    if (!seen.insert(label).second) line.Bad("label '" + label + "' appears twice");
    job->labels.push_back(label);
  }
  if (job->max_new_tokens != 0)
    line.Bad("labels together with max_tokens: a classification job generates nothing");
  if (!job->stop.empty()) line.Bad("labels together with stop");
}

void ParseSampling(const json& body, Line& line, JobSpec* job) {
  Sampling* sampling = &job->sampling;
  if (auto t = Number(body, "temperature", 0, 2, false, line)) sampling->temperature = *t;
  if (auto p = Number(body, "top_p", 0, 1, true, line)) sampling->top_p = *p;
  // vLLM's top_k: -1 (or 0) is off.
  if (auto k = Integer(body, "top_k", -1, INT32_MAX, line)) {
    sampling->top_k = static_cast<int32_t>(std::max<int64_t>(*k, 0));
  }
  const json* seed = Field(body, "seed");
  if (seed != nullptr && seed->is_number_unsigned()) {
    sampling->has_seed = true;
    sampling->seed = seed->get<uint64_t>();
  } else if (seed != nullptr && seed->is_number_integer()) {
    line.Bad("seed " + Shown(*seed) + " is negative");
  } else if (seed != nullptr) {
    line.WrongType("seed", "an integer", *seed);
  }
}

// `endpoint` is empty for an unsupported url (already reported).
void ParseBody(const json& body, const std::optional<Endpoint>& endpoint,
               const BatchInputOptions& options, Line& line, JobSpec* job) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  RefuseUnknown(
      body,
      {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
       "top_k", "seed", "stop", "logprobs", "top_logprobs", "n", "stream", "labels"},
      "body.", options, line);
  if (!options.model_override.empty()) {
    job->model = options.model_override;
  } else if (std::optional<std::string> model = String(body, "model", line)) {
    if (model->empty()) line.Bad("body.model is empty");
    job->model = *model;
  } else if (Field(body, "model") == nullptr) {
    line.Bad("body.model is missing (or give --model)");
  }
  if (chat) {
    if (Field(body, "prompt") != nullptr) {
      line.Bad("/v1/chat/completions takes messages, not prompt");
    }
    ParseMessages(body, options, line, job);
  } else if (endpoint == Endpoint::kCompletions) {
    if (Field(body, "messages") != nullptr) {
      line.Bad("/v1/completions takes prompt, not messages");
    }
    ParsePrompt(body, line, job);
  }  // else the url is already reported; its prompt cannot be judged
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (auto n = Integer(body, key, 1, kMaxTokens, line))
      job->max_new_tokens = static_cast<int32_t>(*n);
  }
  Integer(body, "n", 1, 1, line);  // one choice per job
  if (Boolean(body, "stream", line).value_or(false))
    line.Bad("stream: true is not supported in a batch");
  ParseSampling(body, line, job);
  ParseStop(body, line, job);
  ParseLogprobs(body, chat, line, job);
  ParseLabels(body, line, job);
}

}  // namespace

bool ParseBatchLine(const std::string& text, int64_t number, const BatchInputOptions& options,
                    JobSpec* job, std::vector<LineError>* errors) {
  Line line(number, errors);
  json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) {
    line.Bad("not valid JSON");
    return false;
  }
  if (!object.is_object()) {
    line.Bad(std::string("not a JSON object but ") + TypeName(object));
    return false;
  }
  RefuseUnknown(object, {"custom_id", "method", "url", "body"}, "", options, line);
  std::optional<std::string> custom_id = String(object, "custom_id", line);
  if (!custom_id.has_value() && Field(object, "custom_id") == nullptr)
    line.Bad("custom_id is missing");
  if (custom_id.has_value() && custom_id->empty()) line.Bad("custom_id is empty");
  job->custom_id = custom_id.value_or("");
  std::optional<std::string> method = String(object, "method", line);
  if (!method.has_value() && Field(object, "method") == nullptr) {
    line.Bad("method is missing");
  } else if (method.has_value() && *method != "POST") {
    line.Bad("method is '" + *method + "', not POST");
  }
  std::optional<std::string> url = String(object, "url", line);
  const bool chat = url == "/v1/chat/completions";
  if (!url.has_value() && Field(object, "url") == nullptr) {
    line.Bad("url is missing");
  } else if (url.has_value() && !chat && *url != "/v1/completions") {
    line.Bad("url '" + *url + "' is not supported (/v1/completions or /v1/chat/completions)");
  }
  std::optional<Endpoint> endpoint;
  if (chat) {
    endpoint = Endpoint::kChatCompletions;
  } else if (url == "/v1/completions") {
    endpoint = Endpoint::kCompletions;
  }
  job->endpoint = endpoint.value_or(Endpoint::kCompletions);
  job->prompt_kind = chat ? PromptKind::kChat : PromptKind::kText;
  job->max_new_tokens = 0;  // absent: the scheduler's default
  job->priority = options.priority;
  const json* body = Field(object, "body");
  if (body == nullptr) {
    line.Bad("body is missing");
  } else if (!body->is_object()) {
    line.WrongType("body", "an object", *body);
  } else {
    ParseBody(*body, endpoint, options, line, job);
  }
  return line.ok();
}

BatchInputSummary ParseBatchInput(std::istream& in, const BatchInputOptions& options,
                                  const JobSpecSink& sink) {
  BatchInputSummary summary;
  std::map<std::string, int64_t> first_line;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    summary.lines = number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    JobSpec job;
    const bool ok = ParseBatchLine(text, number, options, &job, &summary.errors);
    if (!job.custom_id.empty()) {
      auto [it, inserted] = first_line.emplace(job.custom_id, number);
      if (!inserted) {
        summary.errors.push_back({number, "duplicate custom_id '" + job.custom_id +
                                              "' (first on line " + std::to_string(it->second) +
                                              ")"});
        continue;
      }
    }
    if (!ok) continue;
    ++summary.job_count;
    if (sink && !sink(std::move(job), number)) break;
  }
  return summary;
}

std::string FormatLineErrors(const std::vector<LineError>& errors) {
  std::string text;
  for (const LineError& e : errors)
    text += "line " + std::to_string(e.line) + ": " + e.reason + "\n";
  return text;
}

// ---------------------------------------------------------------- output

namespace {

using ojson = nlohmann::ordered_json;

// Each label's probability normalised over the labels (a softmax of the
// log-probabilities, computed stably).
ojson Labels(const JobOutput& output) {
  double best = -INFINITY;
  for (const LabelScore& l : output.labels) best = std::max(best, l.logprob);
  double sum = 0;
  for (const LabelScore& l : output.labels) sum += std::exp(l.logprob - best);
  ojson labels = ojson::array();
  for (const LabelScore& l : output.labels) {
    labels.push_back(
        {{"label", l.label}, {"logprob", l.logprob}, {"prob", std::exp(l.logprob - best) / sum}});
  }
  return labels;
}

std::string BestLabel(const JobOutput& output) {
  auto best = std::max_element(
      output.labels.begin(), output.labels.end(),
      [](const LabelScore& a, const LabelScore& b) { return a.logprob < b.logprob; });
  return best == output.labels.end() ? "" : best->label;
}

ojson Bytes(const std::string& text) {
  ojson bytes = ojson::array();
  for (unsigned char c : text) bytes.push_back(c);
  return bytes;
}

// Chat's form: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
ojson ChatLogprobs(const JobOutput& output) {
  ojson content = ojson::array();
  for (const TokenLogprob& t : output.logprobs) {
    ojson top = ojson::array();
    for (const TopLogprob& alt : t.top) {
      top.push_back({{"token", alt.text}, {"logprob", alt.logprob}, {"bytes", Bytes(alt.text)}});
    }
    content.push_back({{"token", t.text},
                       {"logprob", t.logprob},
                       {"bytes", Bytes(t.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Legacy completions' form: parallel lists tokens, token_logprobs,
// top_logprobs ([{text: logprob}]) and text_offset.
ojson CompletionLogprobs(const JobOutput& output) {
  ojson tokens = ojson::array(), token_logprobs = ojson::array(), top = ojson::array(),
        offsets = ojson::array();
  size_t offset = 0;
  for (const TokenLogprob& t : output.logprobs) {
    tokens.push_back(t.text);
    token_logprobs.push_back(t.logprob);
    ojson alternatives = ojson::object();
    for (const TopLogprob& alt : t.top) alternatives[alt.text] = alt.logprob;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += t.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

ojson SuccessBody(const ResultLine& result) {
  const JobOutput& output = result.output;
  const bool chat = result.endpoint == Endpoint::kChatCompletions;
  const bool classify = !output.labels.empty();
  const std::string text = classify ? BestLabel(output) : output.text;
  ojson logprobs = nullptr;
  if (!output.logprobs.empty()) logprobs = chat ? ChatLogprobs(output) : CompletionLogprobs(output);
  ojson choice = ojson::object();
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["index"] = 0;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = output.finish_reason;
  const std::string id = std::to_string(result.job_id);
  ojson body = {{"id", (chat ? "chatcmpl-" : "cmpl-") + id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", result.finished_at_ms / 1000},
                {"model", result.model},
                {"choices", ojson::array({choice})},
                {"usage",
                 {{"prompt_tokens", output.prompt_tokens},
                  {"completion_tokens", output.completion_tokens},
                  {"total_tokens", output.prompt_tokens + output.completion_tokens},
                  {"prompt_tokens_details", {{"cached_tokens", output.cached_prompt_tokens}}}}}};
  if (classify) body["labels"] = Labels(output);
  return body;
}

}  // namespace

ojson BatchOutputLine(const ResultLine& result) {
  const std::string id = std::to_string(result.job_id);
  ojson response = {{"status_code", 200}, {"request_id", "req_" + id}, {"body", nullptr}};
  ojson error = nullptr;
  switch (result.outcome) {
    case LineOutcome::kSucceeded:
      response["body"] = SuccessBody(result);
      break;
    case LineOutcome::kFailed:
      response["status_code"] = 500;
      error = {{"code", "job_failed"}, {"message", result.error}};
      break;
    case LineOutcome::kCancelled:
      response["status_code"] = 409;
      error = {{"code", "job_cancelled"}, {"message", result.error}};
      break;
    case LineOutcome::kExpired:
      response = nullptr;  // never executed, as OpenAI writes it
      error = {{"code", "batch_expired"}, {"message", result.error}};
      break;
  }
  return {{"id", "batch_req_" + id},
          {"custom_id", result.custom_id},
          {"response", response},
          {"error", error}};
}

}  // namespace nightshift::api
