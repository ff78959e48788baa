#include "cli/client/progress.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace nightshift::cli {
namespace {

std::string Printf(const char* format, double a, double b = 0) {
  char text[64];
  std::snprintf(text, sizeof(text), format, a, b);
  return text;
}

std::string Eta(const v1::Submission& s, int64_t now_ms, bool utc) {
  if (!s.has_eta_seconds()) return "ETA ?";
  const double eta = s.eta_seconds();
  return "ETA " + FormatDuration(eta) + " (" +
         FormatClock(now_ms + static_cast<int64_t>(eta * 1000), now_ms, utc) + ")";
}

// The batch's pass and its seconds per pass: the figure the ETA rests on
// once its worker's passes are measured ("measured"), else the batch's own.
std::string Pass(const v1::BatchProgress& b, const char* separator) {
  std::string text = "pass " + std::to_string(b.passes_done());
  if (b.eta_seconds_per_pass() > 0) {
    text += separator + Printf("%.2f s/pass measured", b.eta_seconds_per_pass());
  } else if (b.seconds_per_pass() > 0) {
    text += separator + Printf("%.2f s/pass", b.seconds_per_pass());
  }
  return text;
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof(text), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else {
    std::snprintf(text, sizeof(text), "%lldd%02lldh", static_cast<long long>(s / 86400),
                  static_cast<long long>(s % 86400 / 3600));
  }
  return text;
}

std::string FormatClock(int64_t epoch_ms, int64_t now_ms, bool utc) {
  auto to_tm = [utc](int64_t ms) {
    const time_t t = static_cast<time_t>(ms / 1000);
    struct tm out {};
    if (utc) {
      gmtime_r(&t, &out);
    } else {
      localtime_r(&t, &out);
    }
    return out;
  };
  const struct tm at = to_tm(epoch_ms);
  const struct tm now = to_tm(now_ms);
  const bool same_day = at.tm_year == now.tm_year && at.tm_yday == now.tm_yday;
  char text[32];
  std::strftime(text, sizeof(text), same_day ? "%H:%M" : "%Y-%m-%d %H:%M", &at);
  return text;
}

int64_t FinishedJobs(const v1::JobCounts& c) { return c.succeeded() + c.failed() + c.cancelled(); }

std::string RenderProgressBar(const v1::Submission& s, int width, int64_t now_ms, bool utc) {
  const v1::JobCounts& c = s.counts();
  const int64_t done = FinishedJobs(c);
  constexpr int kBarCells = 20;
  const int filled = c.total() > 0 ? static_cast<int>(done * kBarCells / c.total()) : 0;
  std::string line = "[" + std::string(filled, '#') + std::string(kBarCells - filled, '.') + "] " +
                     std::to_string(done) + "/" + std::to_string(c.total()) + " done";
  if (c.failed() > 0) line += "  " + std::to_string(c.failed()) + " failed";
  if (c.cancelled() > 0) line += "  " + std::to_string(c.cancelled()) + " cancelled";
  line += "  " + Eta(s, now_ms, utc);
  for (const v1::BatchProgress& b : s.batches()) line += "  " + b.worker_id() + ": " + Pass(b, " ");
  if (width > 0 && static_cast<int>(line.size()) > width) line.resize(width);
  return line;
}

std::string RenderProgressLine(const v1::Submission& s, int64_t now_ms, bool utc) {
  const v1::JobCounts& c = s.counts();
  std::string line = "submission " + std::to_string(s.id()) + ": " +
                     std::to_string(FinishedJobs(c)) + "/" + std::to_string(c.total()) + " done (" +
                     std::to_string(c.succeeded()) + " succeeded, " + std::to_string(c.failed()) +
                     " failed, " + std::to_string(c.cancelled()) + " cancelled), " +
                     std::to_string(c.running() + c.leased()) + " running, " +
                     std::to_string(c.queued()) + " queued; " + Eta(s, now_ms, utc);
  for (const v1::BatchProgress& b : s.batches()) {
    line +=
        "; batch " + std::to_string(b.batch_id()) + " on " + b.worker_id() + ": " + Pass(b, ", ");
  }
  return line;
}

std::string FormatCount(int64_t n) {
  const uint64_t magnitude = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  const std::string digits = std::to_string(magnitude);
  std::string text = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}

std::string RenderPromptTokens(const v1::PromptTokenUsage& usage) {
  if (usage.jobs() == 0) return "prompt tokens: none yet (no job has succeeded)";
  std::string text = "prompt tokens: " + FormatCount(usage.prompt_tokens());
  if (usage.prompt_tokens() <= 0) return text;
  const int64_t percent = usage.cached_prompt_tokens() * 100 / usage.prompt_tokens();
  return text + ", " + FormatCount(usage.cached_prompt_tokens()) +
         " of them computed once for several jobs (" + std::to_string(percent) + "%)";
}

std::string RenderOutcome(const v1::Submission& s) {
  const v1::JobCounts& c = s.counts();
  return "submission " + std::to_string(s.id()) + " done: " + std::to_string(c.succeeded()) +
         " succeeded, " + std::to_string(c.failed()) + " failed, " + std::to_string(c.cancelled()) +
         " cancelled";
}

int OutcomeExitCode(const v1::Submission& s) {
  return s.counts().succeeded() == s.counts().total() ? 0 : 1;
}

}  // namespace nightshift::cli
