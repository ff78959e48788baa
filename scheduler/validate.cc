#include "scheduler/validate.h"

#include <map>
#include <set>

namespace nightshift::scheduler {
namespace {

std::string Range(int64_t low, int64_t high) {
  return "[" + std::to_string(low) + ", " + std::to_string(high) + "]";
}

// The reasons one job is bad; empty when it is fine.
std::vector<std::string> JobProblems(JobSpec& job, const SubmitLimits& limits) {
  std::vector<std::string> problems;
  auto bad = [&](std::string reason) { problems.push_back(std::move(reason)); };
  if (job.custom_id.empty()) bad("custom_id is empty");
  if (job.model.empty()) bad("model is empty");
  const bool chat = job.endpoint == Endpoint::kChatCompletions;
  switch (job.prompt_kind) {
    case PromptKind::kText:
      if (chat) bad("/v1/chat/completions takes messages, not a prompt");
      if (job.prompt_text.empty()) bad("prompt is empty");
      break;
    case PromptKind::kTokenIds:
      if (chat) bad("/v1/chat/completions takes messages, not a prompt");
      if (job.prompt_token_ids.empty()) bad("prompt is empty");
      for (int32_t id : job.prompt_token_ids) {
        if (id < 0) {
          bad("prompt token id " + std::to_string(id) + " is negative");
          break;
        }
      }
      break;
    case PromptKind::kChat:
      if (!chat) bad("/v1/completions takes a prompt, not messages");
      if (job.messages.empty()) bad("messages are empty");
      for (size_t i = 0; i < job.messages.size(); ++i) {
        if (job.messages[i].role.empty()) bad("message " + std::to_string(i) + " has no role");
      }
      break;
  }
  const bool classify = !job.labels.empty();
  if (classify) {
    if (job.max_new_tokens != 0) {
      bad("labels together with generation (max_new_tokens " + std::to_string(job.max_new_tokens) +
          "): a classification job scores its labels and generates nothing");
    }
    if (!job.stop.empty()) bad("labels together with stop strings");
    if (static_cast<int64_t>(job.labels.size()) > limits.max_labels) {
      bad(std::to_string(job.labels.size()) + " labels; at most " +
          std::to_string(limits.max_labels));
    }
    std::set<std::string> seen;
    for (const std::string& label : job.labels) {
      if (label.empty()) bad("a label is empty");
      if (!seen.insert(label).second) bad("label '" + label + "' appears twice");
    }
  } else {
    if (job.max_new_tokens == 0) job.max_new_tokens = limits.default_max_new_tokens;
    if (job.max_new_tokens < 1 || job.max_new_tokens > limits.max_new_tokens) {
      bad("max_new_tokens " + std::to_string(job.max_new_tokens) + " is out of range " +
          Range(1, limits.max_new_tokens));
    }
  }
  const Sampling& s = job.sampling;
  if (!(s.temperature >= 0 && s.temperature <= 2)) {
    bad("temperature " + std::to_string(s.temperature) + " is out of range [0, 2]");
  }
  if (!(s.top_p > 0 && s.top_p <= 1))
    bad("top_p " + std::to_string(s.top_p) + " is out of range (0, 1]");
  if (s.top_k < 0) bad("top_k " + std::to_string(s.top_k) + " is negative");
  if (job.top_logprobs < 0 || job.top_logprobs > limits.max_top_logprobs) {
    bad("top_logprobs " + std::to_string(job.top_logprobs) + " is out of range " +
        Range(0, limits.max_top_logprobs));
  }
  if (job.top_logprobs > 0 && !job.logprobs) bad("top_logprobs needs logprobs");
  if (static_cast<int64_t>(job.stop.size()) > limits.max_stop) {
    bad(std::to_string(job.stop.size()) + " stop strings; at most " +
        std::to_string(limits.max_stop));
  }
  for (const std::string& stop : job.stop) {
    if (stop.empty()) bad("a stop string is empty");
  }
  return problems;
}

}  // namespace

std::string UnknownModelProblem(const std::string& model,
                                const std::set<std::string>& known_models) {
  if (model.empty() || known_models.count(model) != 0) return "";
  std::string known;
  int shown = 0;
  for (const std::string& name : known_models) {
    if (shown++ == 8) {
      known += ", ...";
      break;
    }
    known += (known.empty() ? "" : ", ") + name;
  }
  return "model '" + model + "' is served by no worker that has attached (" +
         (known.empty() ? std::string("none has yet") : "known: " + known) +
         "); start its worker first, or run the scheduler with --allow-unknown-models";
}

std::vector<JobProblem> FindJobProblems(std::vector<JobSpec>& jobs, const SubmitLimits& limits,
                                        const std::vector<std::string>& decode_problems,
                                        const std::set<std::string>* known_models) {
  std::vector<JobProblem> found;
  std::map<std::string, size_t> first_use;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (i < decode_problems.size() && !decode_problems[i].empty()) {
      found.push_back({i, decode_problems[i]});
    }
    for (std::string& p : JobProblems(jobs[i], limits)) found.push_back({i, std::move(p)});
    if (known_models != nullptr) {
      std::string unknown = UnknownModelProblem(jobs[i].model, *known_models);
      if (!unknown.empty()) found.push_back({i, std::move(unknown)});
    }
    if (!jobs[i].custom_id.empty()) {
      auto [it, inserted] = first_use.emplace(jobs[i].custom_id, i);
      if (!inserted) {
        found.push_back({i, "duplicate custom_id '" + jobs[i].custom_id + "' (job " +
                                std::to_string(it->second) + ")"});
      }
    }
  }
  return found;
}

size_t CountBadJobs(const std::vector<JobProblem>& problems) {
  std::set<size_t> jobs;
  for (const JobProblem& problem : problems) jobs.insert(problem.index);
  return jobs.size();
}

std::string FormatJobProblems(const std::vector<JobProblem>& problems) {
  std::string errors;
  size_t listed = 0;
  for (const JobProblem& problem : problems) {
    if (listed == kMaxProblemsInMessage) break;
    std::string entry = (errors.empty() ? "" : "; ") + std::string("job ") +
                        std::to_string(problem.index) + ": " + problem.reason;
    if (errors.size() + entry.size() > kMaxProblemsMessageBytes) {
      if (listed > 0) break;
      // The first entry alone is too long: cut it (at a UTF-8 boundary).
      size_t cut = kMaxProblemsMessageBytes - 3;
      while (cut > 0 && (static_cast<unsigned char>(entry[cut]) & 0xC0) == 0x80) --cut;
      entry = entry.substr(0, cut) + "...";
    }
    errors += entry;
    ++listed;
  }
  if (listed < problems.size()) {
    errors += "; and " + std::to_string(problems.size() - listed) + " more problem" +
              (problems.size() - listed == 1 ? "" : "s") + " (" +
              std::to_string(CountBadJobs(problems)) + " bad jobs in all)";
  }
  return errors;
}

Status CheckRequestSize(size_t jobs, int64_t request_bytes, const SubmitLimits& limits) {
  if (jobs == 0) return InvalidArgument("the request has no jobs");
  if (static_cast<int64_t>(jobs) > limits.max_jobs_per_request) {
    return InvalidArgument("the request has " + std::to_string(jobs) + " jobs; at most " +
                           std::to_string(limits.max_jobs_per_request) +
                           " per request (send the rest in further chunks)");
  }
  if (request_bytes > limits.max_request_bytes) {
    return InvalidArgument("the request is " + std::to_string(request_bytes) + " bytes; at most " +
                           std::to_string(limits.max_request_bytes) + " (send it in chunks)");
  }
  return Status::Ok();
}

Status ValidateJobs(std::vector<JobSpec>& jobs, int64_t request_bytes, const SubmitLimits& limits,
                    const std::vector<std::string>& decode_problems,
                    const std::set<std::string>* known_models) {
  NS_RETURN_IF_ERROR(CheckRequestSize(jobs.size(), request_bytes, limits));
  const std::vector<JobProblem> problems =
      FindJobProblems(jobs, limits, decode_problems, known_models);
  if (!problems.empty()) return InvalidArgument(FormatJobProblems(problems));
  return Status::Ok();
}

Status CheckContext(const JobSpec& spec, const TokenisedPrompt& tokens,
                    int64_t max_context_tokens) {
  if (max_context_tokens <= 0) return Status::Ok();
  // The API's rule (OpenAI's, vLLM's max_model_len): prompt + max_tokens
  // must fit, though the KV cache holds one position fewer (KvTokens).
  const int64_t prompt = static_cast<int64_t>(tokens.prompt.size());
  int64_t needed = prompt;
  if (spec.labels.empty()) needed += spec.max_new_tokens;
  for (const auto& label : tokens.labels) needed += static_cast<int64_t>(label.size());
  if (needed <= max_context_tokens) return Status::Ok();
  const std::string rest = spec.labels.empty() ? std::to_string(spec.max_new_tokens) + " new tokens"
                                               : std::to_string(needed - prompt) + " label tokens";
  return InvalidArgument("prompt of " + std::to_string(prompt) + " tokens + " + rest + " = " +
                         std::to_string(needed) + " tokens exceeds the model's context of " +
                         std::to_string(max_context_tokens) +
                         " tokens (prompts are never "
                         "truncated)");
}

}  // namespace nightshift::scheduler
