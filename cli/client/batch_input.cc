#include "cli/client/batch_input.h"

#include <algorithm>
#include <regex>
#include <set>

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

void BadLineReport::Recount() {
  std::set<int64_t> lines;
  for (const LineError& e : listed_) lines.insert(e.line);
  listed_lines_ = lines.size();
}

void BadLineReport::AddLocal(const std::vector<LineError>& errors) {
  listed_.insert(listed_.end(), errors.begin(), errors.end());
  Recount();
}

void BadLineReport::AddChecked(const v1::CheckJobsResponse& response,
                               const std::vector<int64_t>& lines) {
  std::set<int64_t> named;
  for (const v1::JobProblem& p : response.problems()) {
    if (p.index() < 0 || static_cast<size_t>(p.index()) >= lines.size()) continue;
    listed_.push_back({lines[p.index()], p.reason()});
    named.insert(p.index());
  }
  unlisted_ += std::max<int64_t>(0, response.bad_jobs() - static_cast<int64_t>(named.size()));
  Recount();
}

std::string BadLineReport::Format(size_t max_lines) const {
  std::vector<LineError> sorted = listed_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const LineError& a, const LineError& b) { return a.line < b.line; });
  std::string text;
  int64_t shown = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const bool new_line = i == 0 || sorted[i].line != sorted[i - 1].line;
    if (new_line && static_cast<size_t>(shown) == max_lines) break;
    if (new_line) ++shown;
    text += "line " + std::to_string(sorted[i].line) + ": " + sorted[i].reason + "\n";
  }
  if (shown < bad_lines()) {
    text += "... and " + std::to_string(bad_lines() - shown) + " more bad line" +
            (bad_lines() - shown == 1 ? "" : "s") + " (" + std::to_string(bad_lines()) +
            " in all)\n";
  }
  return text;
}

}  // namespace nightshift::cli
