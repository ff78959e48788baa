#include "scheduler/service.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iostream>
#include <thread>

#include "nightshift.grpc.pb.h"
#include "proto/grpc_status.h"
#include "scheduler/metrics.h"
#include "scheduler/wire.h"

namespace nightshift::scheduler {

namespace {

void LogLine(const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cerr << "nightshift-scheduler: " << line << std::endl;
}

// A fixed set of threads for handler work that blocks (SQLite commits wait
// for fsync). Tasks run in submission order across the threads; a task that
// must follow another (messages of one stream) is submitted after it ends.
class WorkQueue {
 public:
  explicit WorkQueue(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Run(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

enum class Role { kClient, kWorker };

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

grpc::Status Authorize(const grpc::CallbackServerContext* ctx, const ServiceOptions& options,
                       Role role) {
  const std::string& mine = role == Role::kClient ? options.client_token : options.worker_token;
  const std::string& other = role == Role::kClient ? options.worker_token : options.client_token;
  if (mine.empty() && other.empty()) return grpc::Status::OK;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing 'authorization: Bearer TOKEN' metadata");
  }
  const std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.substr(0, kBearer.size()) != kBearer) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "authorization is not a bearer token");
  }
  const std::string_view token = value.substr(kBearer.size());
  if (!mine.empty() && ConstantTimeEquals(token, mine)) return grpc::Status::OK;
  if (!other.empty() && ConstantTimeEquals(token, other)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        role == Role::kClient ? "a worker token cannot use JobService"
                                              : "a client token cannot attach as a worker");
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid token");
}

// A server stream that ends at once with an error.
template <typename Message>
class FailedWriter : public grpc::ServerWriteReactor<Message> {
 public:
  explicit FailedWriter(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// ---------------------------------------------------------------- WatchSubmission

// Streams a submission's updates. The scheduler calls OnUpdate under its lock
// (on any thread); events queue here and are written one at a time. The
// stream ends after the update whose submission is done, or when the client
// goes away; the watch is removed before the reactor is deleted.
class WatchReactor : public grpc::ServerWriteReactor<v1::SubmissionEvent>,
                     public SubmissionWatcher {
 public:
  WatchReactor(Scheduler* scheduler, int64_t submission_id) : scheduler_(scheduler) {
    auto watch = scheduler_->Watch(submission_id, this);
    std::lock_guard<std::mutex> lock(mu_);
    if (!watch.ok()) {
      queue_.clear();
      finished_ = true;
      Finish(api::ToGrpcStatus(watch.status()));
      return;
    }
    watch_id_ = *watch;
    registered_ = true;
    PumpLocked();
  }

  void OnUpdate(const SubmissionUpdate& update) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || final_queued_) return;
    v1::SubmissionEvent event;
    wire::ToProto(update, &event);
    queue_.push_back(std::move(event));
    if (update.status.submission.done()) final_queued_ = true;
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
    PumpLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    PumpLocked();
  }

  void OnDone() override {
    if (registered_) scheduler_->Unwatch(watch_id_);
    delete this;
  }

 private:
  // Starts the next write, or finishes once the last event is out (or the
  // client is gone). Never before the watch is registered, so that OnDone
  // always unregisters it.
  void PumpLocked() {
    if (finished_ || writing_ || !registered_) return;
    if (!cancelled_ && !queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      StartWrite(&current_);
      return;
    }
    if (cancelled_ || final_queued_) {
      finished_ = true;
      Finish(cancelled_ ? grpc::Status::CANCELLED : grpc::Status::OK);
    }
  }

  Scheduler* scheduler_;
  std::mutex mu_;
  std::deque<v1::SubmissionEvent> queue_;
  v1::SubmissionEvent current_;
  int64_t watch_id_ = 0;
  bool registered_ = false;
  bool writing_ = false;
  bool final_queued_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
};

// ---------------------------------------------------------------- StreamResults

// Writes every job of a submission in input order, a page at a time.
class ResultsReactor : public grpc::ServerWriteReactor<v1::Job> {
 public:
  ResultsReactor(Scheduler* scheduler, int64_t submission_id, int64_t after_id)
      : scheduler_(scheduler), submission_id_(submission_id), after_id_(after_id) {
    if (submission_id <= 0) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "submission_id is required"));
      return;
    }
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  static constexpr int kPage = 200;

  void Next() {
    if (index_ >= page_.size()) {
      if (done_) {
        Finish(grpc::Status::OK);
        return;
      }
      JobFilter filter;
      filter.submission_id = submission_id_;
      filter.with_results = true;
      auto page = scheduler_->ListJobs(filter, after_id_, kPage);
      if (!page.ok()) {
        Finish(api::ToGrpcStatus(page.status()));
        return;
      }
      page_ = std::move(page->jobs);
      index_ = 0;
      done_ = page->next_after_id == 0;
      if (!page_.empty()) after_id_ = page_.back().job.id;
      if (page_.empty()) {
        Finish(grpc::Status::OK);
        return;
      }
    }
    current_.Clear();
    wire::ToProto(page_[index_++], &current_);
    StartWrite(&current_);
  }

  Scheduler* scheduler_;
  int64_t submission_id_;
  int64_t after_id_;
  std::vector<JobView> page_;
  size_t index_ = 0;
  bool done_ = false;
  v1::Job current_;
};

}  // namespace

// ---------------------------------------------------------------- the services

class Service::Impl {
 public:
  Impl(Scheduler* scheduler, ServiceOptions options)
      : scheduler_(scheduler),
        options_(std::move(options)),
        pool_(options_.threads),
        jobs_(this),
        workers_(this) {}

  class JobServiceImpl;
  class WorkerServiceImpl;
  class AttachReactor;

  // Runs `fn` (returning a Status) on the pool and finishes the unary call
  // with its mapped status; auth, cancellation and deadline are checked first.
  template <typename Fn>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    grpc::Status auth = Authorize(ctx, options_, Role::kClient);
    if (!auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    pool_.Run([ctx, reactor, fn = std::move(fn)]() mutable {
      if (ctx->IsCancelled()) {
        reactor->Finish(grpc::Status::CANCELLED);
      } else if (ctx->deadline() < std::chrono::system_clock::now()) {
        reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded"));
      } else {
        reactor->Finish(api::ToGrpcStatus(fn()));
      }
    });
    return reactor;
  }

  Scheduler* scheduler_;
  ServiceOptions options_;
  WorkQueue pool_;

  class JobServiceImpl final : public v1::JobService::CallbackService {
   public:
    explicit JobServiceImpl(Impl* impl) : impl_(impl) {}

    grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                            const v1::GetServerInfoRequest*,
                                            v1::ServerInfo* resp) override {
      return impl_->Unary(ctx, [this, resp] {
        resp->set_version(impl_->options_.version);
        resp->set_schema_version(impl_->options_.schema_version);
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* SubmitJobs(grpc::CallbackServerContext* ctx,
                                         const v1::SubmitJobsRequest* req,
                                         v1::SubmitJobsResponse* resp) override {
      const auto start = std::chrono::steady_clock::now();
      return impl_->Unary(ctx, [this, req, resp, start]() -> Status {
        auto reply = impl_->scheduler_->Submit(wire::FromProto(*req));
        if (impl_->options_.metrics != nullptr) {
          const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
          impl_->options_.metrics->SubmitAnswered(took.count());
        }
        if (!reply.ok()) return reply.status();
        resp->set_submission_id(reply->submission_id);
        resp->mutable_job_ids()->Assign(reply->job_ids.begin(), reply->job_ids.end());
        resp->set_replayed(reply->replayed);
        resp->set_waiting_for_tokenizer(reply->waiting_for_tokenizer);
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* CheckJobs(grpc::CallbackServerContext* ctx,
                                        const v1::SubmitJobsRequest* req,
                                        v1::CheckJobsResponse* resp) override {
      return impl_->Unary(ctx, [this, req, resp]() -> Status {
        NS_ASSIGN_OR_RETURN(auto problems, impl_->scheduler_->CheckRequest(wire::FromProto(*req)));
        wire::ToProto(problems, resp);
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* GetSubmission(grpc::CallbackServerContext* ctx,
                                            const v1::GetSubmissionRequest* req,
                                            v1::Submission* resp) override {
      return impl_->Unary(ctx, [this, req, resp]() -> Status {
        NS_ASSIGN_OR_RETURN(auto status, impl_->scheduler_->GetSubmission(
                                             req->submission_id(), req->with_prompt_tokens()));
        wire::ToProto(status, resp);
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                     v1::Job* resp) override {
      return impl_->Unary(ctx, [this, req, resp]() -> Status {
        NS_ASSIGN_OR_RETURN(auto view, impl_->scheduler_->GetJob(req->job_id()));
        wire::ToProto(view, resp);
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                       const v1::ListJobsRequest* req,
                                       v1::ListJobsResponse* resp) override {
      return impl_->Unary(ctx, [this, req, resp]() -> Status {
        JobFilter filter;
        filter.submission_id = req->submission_id();
        filter.state = wire::FromProto(req->state());
        filter.model = req->model();
        filter.with_results = req->with_output();
        int64_t after = 0;
        if (!req->page_token().empty()) {
          char* end = nullptr;
          after = std::strtoll(req->page_token().c_str(), &end, 10);
          if (*end != '\0' || after < 0) return InvalidArgument("malformed page_token");
        }
        const int size = req->page_size() == 0 ? 100 : req->page_size();
        if (size < 0 || size > 1000) return InvalidArgument("page_size must be in [0, 1000]");
        NS_ASSIGN_OR_RETURN(JobPage page, impl_->scheduler_->ListJobs(filter, after, size));
        for (const JobView& view : page.jobs) wire::ToProto(view, resp->add_jobs());
        if (page.next_after_id != 0) resp->set_next_page_token(std::to_string(page.next_after_id));
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* CancelSubmission(grpc::CallbackServerContext* ctx,
                                               const v1::CancelSubmissionRequest* req,
                                               v1::Submission* resp) override {
      return impl_->Unary(ctx, [this, req, resp]() -> Status {
        NS_ASSIGN_OR_RETURN(auto status, impl_->scheduler_->CancelSubmission(req->submission_id()));
        wire::ToProto(status, resp);
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                        const v1::CancelJobRequest* req, v1::Job* resp) override {
      return impl_->Unary(ctx, [this, req, resp]() -> Status {
        NS_ASSIGN_OR_RETURN(auto view, impl_->scheduler_->CancelJob(req->job_id()));
        wire::ToProto(view, resp);
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* ctx,
                                          const v1::ListWorkersRequest*,
                                          v1::ListWorkersResponse* resp) override {
      return impl_->Unary(ctx, [this, resp]() -> Status {
        NS_ASSIGN_OR_RETURN(auto workers, impl_->scheduler_->ListWorkers());
        for (const WorkerStatus& w : workers) wire::ToProto(w, resp->add_workers());
        return Status::Ok();
      });
    }

    grpc::ServerUnaryReactor* Estimate(grpc::CallbackServerContext* ctx,
                                       const v1::EstimateRequest* req,
                                       v1::EstimateResponse* resp) override {
      return impl_->Unary(ctx, [this, req, resp]() -> Status {
        NS_ASSIGN_OR_RETURN(auto estimate,
                            impl_->scheduler_->EstimateModel(
                                req->model(), req->jobs() == 0 ? 1 : req->jobs(),
                                req->prompt_tokens() == 0 ? 512 : req->prompt_tokens(),
                                req->max_new_tokens() == 0 ? 16 : req->max_new_tokens()));
        wire::ToProto(estimate, resp);
        return Status::Ok();
      });
    }

    grpc::ServerWriteReactor<v1::SubmissionEvent>* WatchSubmission(
        grpc::CallbackServerContext* ctx, const v1::WatchSubmissionRequest* req) override {
      grpc::Status auth = Authorize(ctx, impl_->options_, Role::kClient);
      if (!auth.ok()) return new FailedWriter<v1::SubmissionEvent>(auth);
      return new WatchReactor(impl_->scheduler_, req->submission_id());
    }

    grpc::ServerWriteReactor<v1::Job>* StreamResults(grpc::CallbackServerContext* ctx,
                                                     const v1::StreamResultsRequest* req) override {
      grpc::Status auth = Authorize(ctx, impl_->options_, Role::kClient);
      if (!auth.ok()) return new FailedWriter<v1::Job>(auth);
      return new ResultsReactor(impl_->scheduler_, req->submission_id(), req->after_job_id());
    }

   private:
    Impl* impl_;
  };

  // One worker's Attach stream, and its WorkerLink. Messages are handled one
  // at a time, in order, on the pool; commands from the scheduler are queued
  // and written one at a time. Reference counted: gRPC holds one reference
  // until OnDone, each pool task one while it runs.
  class AttachReactor : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::SchedulerMessage>,
                        public WorkerLink {
   public:
    AttachReactor(Impl* impl, grpc::Status auth) : impl_(impl) {
      if (!auth.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        FinishLocked(std::move(auth));
        return;
      }
      StartRead(&in_);
    }

    // WorkerLink: called by the scheduler under its lock.
    void Send(WorkerCommand command) override {
      v1::SchedulerMessage message;
      wire::ToProto(command, &message);
      std::lock_guard<std::mutex> lock(mu_);
      if (finish_requested_) return;
      out_.push_back(std::move(message));
      WriteLocked();
    }

    void Close(const Status& why) override {
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(grpc::Status(grpc::StatusCode::ABORTED, why.message()));
    }

    void OnReadDone(bool ok) override {
      Ref();
      impl_->pool_.Run([this, ok] {
        if (ok) {
          Handle();
          std::lock_guard<std::mutex> lock(mu_);
          if (!finish_requested_) StartRead(&in_);
        } else {
          Detach();  // the worker closed the stream or the connection broke
          std::lock_guard<std::mutex> lock(mu_);
          FinishLocked(grpc::Status::OK);
        }
        Unref();
      });
    }

    void OnWriteDone(bool ok) override {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {
        out_.clear();
        broken_ = true;
      } else if (!out_.empty()) {
        out_.pop_front();
      }
      WriteLocked();
    }

    void OnDone() override {
      Detach();  // normally done already; a no-op then
      Unref();
    }

   private:
    void Ref() {
      std::lock_guard<std::mutex> lock(mu_);
      ++refs_;
    }

    void Unref() {
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last = --refs_ == 0;
      }
      if (last) delete this;
    }

    void Handle() {
      const v1::WorkerMessage& m = in_;
      Scheduler* s = impl_->scheduler_;
      if (session_ == 0) {
        if (m.kind_case() != v1::WorkerMessage::kHello) {
          std::lock_guard<std::mutex> lock(mu_);
          FinishLocked(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                    "the first message of Attach must be hello"));
          return;
        }
        WorkerHello hello = wire::FromProto(m.hello());
        auto session = s->Attach(hello, this);
        if (!session.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          FinishLocked(api::ToGrpcStatus(session.status()));
          return;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          worker_id_ = hello.info.id;
          session_ = *session;
        }
        LogLine("worker " + worker_id_ + " attached (session " + std::to_string(session_) + ", " +
                std::to_string(hello.info.models.size()) + " models)");
        return;
      }
      Status status;
      switch (m.kind_case()) {
        case v1::WorkerMessage::kHello:
          status = FailedPrecondition("a second hello on the same stream");
          break;
        case v1::WorkerMessage::kTokenizer:
          status = s->UploadTokenizer(worker_id_, session_, wire::FromProto(m.tokenizer()));
          break;
        case v1::WorkerMessage::kHeartbeat:
          status = s->Heartbeat(worker_id_, session_);
          break;
        case v1::WorkerMessage::kPass:
          status = s->Progress(worker_id_, session_, wire::FromProto(m.pass()));
          break;
        case v1::WorkerMessage::kResult:
        case v1::WorkerMessage::kResults: {
          std::vector<JobResult> results;
          if (m.has_result()) results.push_back(wire::FromProto(m.result()));
          for (const auto& r : m.results().results()) results.push_back(wire::FromProto(r));
          auto statuses = s->Results(worker_id_, session_, std::move(results));
          if (!statuses.ok()) return EndForResend(statuses.status());
          for (const Status& refused : *statuses) {
            if (!refused.ok()) LogLine("worker " + worker_id_ + ": " + refused.ToString());
          }
          break;
        }
        case v1::WorkerMessage::kHandBack:
          status = s->HandBack(worker_id_, session_, m.hand_back().batch_id(),
                               {m.hand_back().job_ids().begin(), m.hand_back().job_ids().end()},
                               m.hand_back().draining(), m.hand_back().error());
          if (!m.hand_back().error().empty()) {
            LogLine("worker " + worker_id_ + " could not run " +
                    std::to_string(m.hand_back().job_ids_size()) + " jobs of batch " +
                    std::to_string(m.hand_back().batch_id()) + ": " + m.hand_back().error());
          }
          break;
        case v1::WorkerMessage::kModelHealth:
          status = s->ModelHealth(worker_id_, session_, m.model_health().model(),
                                  m.model_health().unhealthy());
          LogLine("worker " + worker_id_ + ": model " + m.model_health().model() +
                  (m.model_health().unhealthy().empty()
                       ? " is healthy again"
                       : " is unhealthy: " + m.model_health().unhealthy()));
          break;
        case v1::WorkerMessage::kWithdraw:
          status = s->Withdraw(worker_id_, session_, m.withdraw().model(), m.withdraw().reason());
          break;
        case v1::WorkerMessage::KIND_NOT_SET:
          status = InvalidArgument("an empty message");
          break;
      }
      // Refused results (duplicate, late) and the like are logged; the
      // stream goes on. A fenced stream is ended by Close.
      if (!status.ok()) LogLine("worker " + worker_id_ + ": " + status.ToString());
    }

    // Results that could not be stored (a full disk, a failing one) are not
    // acknowledged, and a worker resends what it holds only on a new
    // stream: end this one with the error, so the worker reconnects (with
    // backoff) and resends them until the store takes them.
    void EndForResend(const Status& why) {
      LogLine("worker " + worker_id_ + ": results not stored, ending its stream so that it " +
              "resends them: " + why.ToString());
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(api::ToGrpcStatus(why));
    }

    void Detach() {
      std::string worker;
      int64_t session = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (session_ == 0 || detached_) return;
        detached_ = true;
        worker = worker_id_;
        session = session_;
      }
      impl_->scheduler_->Detach(worker, session);
      LogLine("worker " + worker + " detached (session " + std::to_string(session) + ")");
    }

    void WriteLocked() {
      if (writing_ || broken_) return;
      if (!out_.empty()) {
        writing_ = true;
        StartWrite(&out_.front());
        return;
      }
      if (finish_requested_ && !finished_) {
        finished_ = true;
        Finish(finish_status_);
      }
    }

    // Ends the stream once pending writes are out (at once if writing broke).
    void FinishLocked(grpc::Status status) {
      if (finish_requested_) return;
      finish_requested_ = true;
      finish_status_ = std::move(status);
      WriteLocked();
      if (broken_ && !finished_) {
        finished_ = true;
        Finish(finish_status_);
      }
    }

    Impl* impl_;
    std::mutex mu_;
    int refs_ = 1;  // gRPC's, released in OnDone
    v1::WorkerMessage in_;
    std::deque<v1::SchedulerMessage> out_;
    bool writing_ = false;
    bool broken_ = false;
    bool finish_requested_ = false;
    bool finished_ = false;
    bool detached_ = false;
    grpc::Status finish_status_;
    std::string worker_id_;
    int64_t session_ = 0;
  };

  class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
   public:
    explicit WorkerServiceImpl(Impl* impl) : impl_(impl) {}
    grpc::ServerBidiReactor<v1::WorkerMessage, v1::SchedulerMessage>* Attach(
        grpc::CallbackServerContext* ctx) override {
      return new AttachReactor(impl_, Authorize(ctx, impl_->options_, Role::kWorker));
    }

   private:
    Impl* impl_;
  };

  JobServiceImpl jobs_;
  WorkerServiceImpl workers_;
};

Service::Service(Scheduler* scheduler, ServiceOptions options)
    : impl_(std::make_unique<Impl>(scheduler, std::move(options))) {}

Service::~Service() = default;

grpc::Service* Service::job_service() { return &impl_->jobs_; }
grpc::Service* Service::worker_service() { return &impl_->workers_; }

}  // namespace nightshift::scheduler
