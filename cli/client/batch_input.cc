#include "cli/client/batch_input.h"

#include <regex>

#include "proto/wire.h"

namespace nightshift::cli {

bool ParseBatchLine(const std::string& text, int64_t number, const BatchInputOptions& options,
                    v1::JobRequest* job, std::vector<LineError>* errors) {
  api::JobSpec spec;
  const bool ok = api::ParseBatchLine(text, number, options, &spec, errors);
  if (ok) api::wire::ToProto(spec, job);
  return ok;
}

BatchInput ParseBatchInput(std::istream& in, const BatchInputOptions& options,
                           const JobSink& sink) {
  BatchInput input;
  api::BatchInputSummary summary =
      api::ParseBatchInput(in, options, [&](api::JobSpec spec, int64_t line) {
        v1::JobRequest job;
        api::wire::ToProto(spec, &job);
        if (sink) return sink(std::move(job), line);
        input.jobs.push_back(std::move(job));
        input.lines.push_back(line);
        return true;
      });
  input.job_count = summary.job_count;
  input.errors = std::move(summary.errors);
  return input;
}

std::string ServerErrorsByLine(const std::string& message, const std::vector<int64_t>& lines) {
  static const std::regex kJob("(?:^|; )job (\\d+): ");
  std::string out;
  size_t copied = 0;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), kJob);
       it != std::sregex_iterator(); ++it) {
    const size_t index = std::stoull((*it)[1].str());
    out += message.substr(copied, it->position() - copied);
    out += index < lines.size() ? "\nline " + std::to_string(lines[index]) + ": " : it->str();
    copied = it->position() + it->length();
  }
  return out + message.substr(copied);
}

}  // namespace nightshift::cli
