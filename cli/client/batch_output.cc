#include "cli/client/batch_output.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace nightshift::cli {
namespace {

using json = nlohmann::ordered_json;

bool IsChat(const v1::Job& job) { return job.url() == "/v1/chat/completions"; }

// Each label's probability normalised over the labels (a softmax of the
// log-probabilities, computed stably).
json Labels(const v1::JobOutput& output) {
  double best = -INFINITY;
  for (const auto& l : output.labels()) best = std::max(best, l.logprob());
  double sum = 0;
  for (const auto& l : output.labels()) sum += std::exp(l.logprob() - best);
  json labels = json::array();
  for (const auto& l : output.labels()) {
    labels.push_back({{"label", l.label()},
                      {"logprob", l.logprob()},
                      {"prob", std::exp(l.logprob() - best) / sum}});
  }
  return labels;
}

std::string BestLabel(const v1::JobOutput& output) {
  auto best = std::max_element(
      output.labels().begin(), output.labels().end(),
      [](const v1::LabelScore& a, const v1::LabelScore& b) { return a.logprob() < b.logprob(); });
  return best == output.labels().end() ? "" : best->label();
}

json Bytes(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(c);
  return bytes;
}

// Chat's form: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json ChatLogprobs(const v1::JobOutput& output) {
  json content = json::array();
  for (const auto& t : output.logprobs()) {
    json top = json::array();
    for (const auto& alt : t.top()) {
      top.push_back(
          {{"token", alt.text()}, {"logprob", alt.logprob()}, {"bytes", Bytes(alt.text())}});
    }
    content.push_back({{"token", t.text()},
                       {"logprob", t.logprob()},
                       {"bytes", Bytes(t.text())},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Legacy completions' form: parallel lists tokens, token_logprobs,
// top_logprobs ([{text: logprob}]) and text_offset.
json CompletionLogprobs(const v1::JobOutput& output) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  size_t offset = 0;
  for (const auto& t : output.logprobs()) {
    tokens.push_back(t.text());
    token_logprobs.push_back(t.logprob());
    json alternatives = json::object();
    for (const auto& alt : t.top()) alternatives[alt.text()] = alt.logprob();
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += t.text().size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json SuccessBody(const v1::Job& job) {
  const v1::JobOutput& output = job.output();
  const bool classify = output.labels_size() > 0;
  const std::string text = classify ? BestLabel(output) : output.text();
  json logprobs = nullptr;
  if (output.logprobs_size() > 0)
    logprobs = IsChat(job) ? ChatLogprobs(output) : CompletionLogprobs(output);
  json choice = json::object();
  if (IsChat(job)) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["index"] = 0;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = output.finish_reason();
  const std::string id = std::to_string(job.id());
  json body = {{"id", (IsChat(job) ? "chatcmpl-" : "cmpl-") + id},
               {"object", IsChat(job) ? "chat.completion" : "text_completion"},
               {"created", job.updated_at_ms() / 1000},
               {"model", job.model()},
               {"choices", json::array({choice})},
               {"usage",
                {{"prompt_tokens", output.prompt_tokens()},
                 {"completion_tokens", output.completion_tokens()},
                 {"total_tokens", output.prompt_tokens() + output.completion_tokens()}}}};
  if (classify) body["labels"] = Labels(output);
  return body;
}

}  // namespace

bool IsFinished(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_SUCCEEDED || job.state() == v1::JOB_STATE_FAILED ||
         job.state() == v1::JOB_STATE_CANCELLED;
}

json BatchOutputLine(const v1::Job& job) {
  const std::string id = std::to_string(job.id());
  json response = {{"status_code", 200}, {"request_id", "req_" + id}, {"body", nullptr}};
  json error = nullptr;
  if (job.state() == v1::JOB_STATE_SUCCEEDED) {
    response["body"] = SuccessBody(job);
  } else {
    const bool cancelled = job.state() == v1::JOB_STATE_CANCELLED;
    response["status_code"] = cancelled ? 409 : 500;
    error = {{"code", cancelled ? "job_cancelled" : "job_failed"},
             {"message", !job.error().empty() ? job.error() : job.reason()}};
  }
  return {{"id", "batch_req_" + id},
          {"custom_id", job.custom_id()},
          {"response", response},
          {"error", error}};
}

}  // namespace nightshift::cli
