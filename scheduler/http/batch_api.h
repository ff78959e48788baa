// The OpenAI Batch API, served by the scheduler: what the official SDKs call
// with only their base_url changed.
//
//   GET    /v1/models                  the models connected workers serve
//   POST   /v1/files                   multipart upload (file, purpose=batch)
//   GET    /v1/files[/{id}[/content]]  list, one, its bytes
//   DELETE /v1/files/{id}
//   POST   /v1/batches                 input_file_id, endpoint, completion_window, metadata
//   GET    /v1/batches[/{id}]          list (newest first, limit/after), one
//   POST   /v1/batches/{id}/cancel
//
// A batch is a submission underneath: `batch_<submission id>`, so `nightshift
// status/watch/results` work on it. POST /v1/batches answers at once with the
// batch `validating`; the runner (a thread of its own, or Step() in tests)
// then checks every line as `nightshift submit` would (the line format, the
// batch's endpoint, the scheduler's CheckJobs) and either fails the batch
// with its bad lines in errors.data[] (nothing queued; the first
// kMaxErrorLines, every kind together, then one `too_many_errors` entry
// counting them all) or submits it in
// chunks (in_progress). It also ends batches: expired once their completion
// window passes (unfinished jobs are cancelled with a `batch_expired`
// reason), finalizing -> completed when every job is done, cancelling ->
// cancelled. Output and error files are rendered from the results table, in
// input order, each time they are downloaded; their sizes are counted at
// finalizing. Errors have OpenAI's shape {"error": {message, type, param,
// code}} with 400, 401, 403, 404, 405, 409, 413, 500, 503, or 507 when the
// scheduler's disk is full (code "insufficient_storage"; nothing of the
// request is kept).
//
// Thread-safety: Handle may be called from any number of threads at once;
// the runner is one thread. Every state change of a batch is a
// compare-and-set on its stored status (ApiStore::UpdateBatch).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "scheduler/http/api_store.h"
#include "scheduler/http/http.h"
#include "scheduler/scheduler.h"
#include "scheduler/store.h"

namespace nightshift::scheduler::http {

// How many bad lines a failed batch's errors.data[] names.
inline constexpr int64_t kMaxErrorLines = 100;

struct BatchApiOptions {
  // Bearer tokens, as for gRPC: both empty = no authentication. A worker
  // token is refused (403).
  std::string client_token;
  std::string worker_token;
  int64_t max_upload_bytes = 200'000'000;  // a larger file is refused (413)
  int64_t max_batch_requests = 50'000;     // a larger input file fails validation
  int64_t poll_ms = 250;                   // how often the runner looks at open batches
  size_t chunk_jobs = 1000;                // jobs per check and per submitted chunk
};

// "24h", or <N>s / <N>m / <N>h up to 24h, in milliseconds; InvalidArgument
// otherwise.
StatusOr<int64_t> ParseCompletionWindow(const std::string& text);

// The reason a job left unrun by its batch's completion window keeps (and
// the prefix that marks it batch_expired in the error file).
inline constexpr const char* kExpiredReason = "batch_expired";

class BatchApi {
 public:
  // Nothing is owned; all must outlive the BatchApi.
  BatchApi(Scheduler* scheduler, Store* store, ApiStore* files, Clock* clock,
           BatchApiOptions options);
  ~BatchApi();  // stops the runner
  BatchApi(const BatchApi&) = delete;
  BatchApi& operator=(const BatchApi&) = delete;

  // Serves one request (auth, routing, the handlers). Never fails as a
  // whole: every problem is an error response. Reads request.body only as
  // far as it needs; the caller discards the rest.
  HttpResponse Handle(const HttpRequest& request);

  // Starts / stops the runner thread, which calls Step every poll_ms and
  // whenever a batch is created or cancelled.
  void Start();
  void Stop();
  // One round of the runner's work: validates batches that wait for it,
  // expires, finalizes. Errors are logged; what failed is retried next round.
  void Step();

 private:
  HttpResponse Route(const HttpRequest& request);
  HttpResponse Models();
  HttpResponse UploadFile(const HttpRequest& request);
  HttpResponse ListFiles(const HttpRequest& request);
  HttpResponse GetFile(int64_t id);
  HttpResponse FileContent(int64_t id);
  HttpResponse DeleteFile(int64_t id);
  HttpResponse CreateBatch(const HttpRequest& request);
  HttpResponse ListBatches(const HttpRequest& request);
  HttpResponse GetBatch(int64_t id);
  HttpResponse CancelBatch(int64_t id);

  // The Batch object, with its counts from the submission.
  StatusOr<std::string> BatchJson(const BatchRecord& batch);
  // Writes the output lines (succeeded jobs) or the error lines (the rest)
  // of a submission's finished jobs, in input order, to `sink`; returns how
  // many lines were written.
  StatusOr<int64_t> RenderLines(int64_t submission_id, bool errors,
                                const std::function<Status(std::string_view)>& sink);

  Status Validate(BatchRecord batch);
  // Fails a validating batch with `errors` (a JSON list); its submission is
  // sealed and cancelled, so nothing of it runs.
  Status FailValidation(BatchRecord batch, const std::string& errors);
  Status Advance(BatchRecord batch);
  Status Finalize(BatchRecord batch, const std::string& final_status);
  void Wake();

  Scheduler* scheduler_;
  Store* store_;
  ApiStore* files_;
  Clock* clock_;
  BatchApiOptions options_;

  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  bool woken_ = false;
  std::thread runner_;
};

}  // namespace nightshift::scheduler::http
