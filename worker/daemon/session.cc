#include "worker/daemon/session.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "worker/daemon/log.h"
#include "worker/daemon/wire.h"

namespace nightshift::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kFlushRetrySeconds = 0.5;

std::string Describe(const grpc::Status& status) {
  return status.ok() ? "stream closed" : status.error_message();
}

// "3 jobs of batch 7".
std::string Summary(const v1::JobResults& results) {
  const int64_t batch = results.results_size() > 0 ? results.results(0).batch_id() : 0;
  return std::to_string(results.results_size()) + " jobs of batch " + std::to_string(batch);
}

}  // namespace

Session::Session(SessionOptions options, Worker* worker)
    : options_(std::move(options)), worker_(worker) {}

Session::~Session() {
  if (connection_thread_.joinable()) Stop(0);
}

Status Session::Start() {
  NS_ASSIGN_OR_RETURN(channel_, api::Connect(options_.connect));
  connection_thread_ = std::thread([this] { ConnectionLoop(); });
  return Status::Ok();
}

void Session::Stop(double flush_seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(flush_seconds);
  {
    // Results are worth waiting for a reconnect; a hand-back or a withdrawal
    // alone is not (an expired lease returns those jobs anyway).
    std::unique_lock<std::mutex> lock(mu_);
    flushing_ = true;  // cuts a long reconnect backoff short
    cv_.notify_all();
    cv_.wait_until(lock, deadline, [this] {
      return (queue_.empty() && unacked_.empty()) ||
             (!connected_ && unacked_.empty() &&
              std::none_of(queue_.begin(), queue_.end(),
                           [](const auto& m) { return m.has_results(); }));
    });
    if (!queue_.empty() || !unacked_.empty()) {
      LogLine(std::to_string(queue_.size()) + " messages to the scheduler could not be sent, " +
              std::to_string(unacked_.size()) + " results messages were not acknowledged");
    }
    stopping_ = true;
    cv_.notify_all();
  }
  CloseWrites();
  {
    // The scheduler ends the stream after our WritesDone; do not wait forever.
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(2), [this] { return context_ == nullptr; })) {
      context_->TryCancel();
    }
  }
  if (connection_thread_.joinable()) connection_thread_.join();
}

void Session::CloseWrites() {
  std::unique_lock<std::timed_mutex> writing(write_mu_, std::defer_lock);
  if (writing.try_lock_for(std::chrono::seconds(1))) {
    if (stream_ != nullptr) stream_->WritesDone();
    writes_done_ = true;
    return;
  }
  LogLine("a write to the scheduler is stuck; cancelling the stream");
  std::lock_guard<std::mutex> lock(mu_);
  if (context_ != nullptr) context_->TryCancel();
}

bool Session::connected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connected_;
}

void Session::ConnectionLoop() {
  double backoff = options_.initial_backoff_seconds;
  while (true) {
    bool attached = false;
    const grpc::Status status = AttachOnce(&attached);
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) return;
    // A stream the scheduler ended because it could not store what it was
    // sent (its disk is full) backs off as a refused attach does, so a
    // worker holding results does not reconnect twice a second until the
    // disk has room.
    if (attached && status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
      backoff = options_.initial_backoff_seconds;
    }
    // While Stop waits to deliver results, retry every half second.
    const bool was_flushing = flushing_;
    const double wait = was_flushing ? std::min(backoff, kFlushRetrySeconds) : backoff;
    std::ostringstream line;
    line << (attached ? "connection to the scheduler lost: " : "cannot attach to the scheduler: ")
         << Describe(status) << "; reconnecting in " << wait << " s";
    LogLine(line.str());
    cv_.wait_for(lock, std::chrono::duration<double>(wait),
                 [&] { return stopping_ || flushing_ != was_flushing; });
    if (stopping_) return;
    backoff = std::min(backoff * 2, options_.max_backoff_seconds);
  }
}

grpc::Status Session::AttachOnce(bool* attached) {
  grpc::ClientContext context;
  api::AddToken(&context, options_.connect.token);
  auto stub = v1::WorkerService::NewStub(channel_);
  std::unique_ptr<Stream> stream = stub->Attach(&context);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      context.TryCancel();
      return stream->Finish();
    }
    context_ = &context;
  }
  {
    std::lock_guard<std::timed_mutex> lock(write_mu_);
    stream_ = stream.get();
  }
  std::thread heartbeat;
  std::thread writer;
  v1::SchedulerMessage m;
  if (Write(Hello()) && stream->Read(&m) && m.has_welcome()) {
    *attached = true;
    const v1::Welcome& welcome = m.welcome();
    for (const std::string& hash : welcome.missing_tokenizers()) {
      auto it = options_.tokenizers.find(hash);
      if (it == options_.tokenizers.end()) continue;
      v1::WorkerMessage upload;
      wire::ToProto(it->second, upload.mutable_tokenizer());
      Write(upload);
      LogLine("uploaded tokenizer " + hash.substr(0, 12));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      connected_ = true;
      if (latest_pass_) {
        queue_.push_back(std::move(*latest_pass_));
        latest_pass_.reset();
      }
    }
    LogLine("attached to " + options_.connect.address + " as " + options_.info.id + " (session " +
            std::to_string(welcome.session()) + ")");
    writer = std::thread([this] { WriterLoop(); });
    const double interval = welcome.heartbeat_seconds() > 0 ? welcome.heartbeat_seconds() : 1.0;
    heartbeat = std::thread([this, interval] { HeartbeatLoop(interval); });
    while (stream->Read(&m)) {
      if (m.has_assign()) {
        worker_->Assign(wire::FromProto(m.assign()));
      } else if (m.has_cancel()) {
        worker_->Cancel(wire::FromProto(m.cancel()));
      } else if (m.has_stored()) {
        Acknowledge(m.stored());
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected_ = false;
    // Of the pass reports not written, the newest goes on the next stream.
    for (const v1::WorkerMessage& m : queue_) {
      if (m.has_pass()) latest_pass_ = m;
    }
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                                [](const v1::WorkerMessage& m) { return m.has_pass(); }),
                 queue_.end());
    cv_.notify_all();
  }
  // Once attached, the writer and heartbeat threads may be stuck in a write:
  // cancelling ends the call if only our side saw the break. A refused attach
  // is not cancelled, so Finish reports the scheduler's reason (a bad token).
  if (*attached) context.TryCancel();
  if (heartbeat.joinable()) heartbeat.join();
  if (writer.joinable()) writer.join();
  {
    // Results the scheduler may not have stored go first on the next stream;
    // only now, with the writer stopped, is none it wrote still to come.
    std::lock_guard<std::mutex> lock(mu_);
    queue_.insert(queue_.begin(), unacked_.begin(), unacked_.end());
    unacked_.clear();
  }
  {
    std::lock_guard<std::timed_mutex> lock(write_mu_);
    stream_ = nullptr;
  }
  grpc::Status status = stream->Finish();
  std::lock_guard<std::mutex> lock(mu_);
  context_ = nullptr;
  cv_.notify_all();
  return status;
}

void Session::HeartbeatLoop(double interval_seconds) {
  v1::WorkerMessage beat;
  beat.mutable_heartbeat();
  std::unique_lock<std::mutex> lock(mu_);
  while (connected_ && !stopping_) {
    cv_.wait_for(lock, std::chrono::duration<double>(interval_seconds),
                 [this] { return !connected_ || stopping_; });
    if (!connected_ || stopping_) return;
    lock.unlock();
    Write(beat);
    lock.lock();
  }
}

v1::WorkerMessage Session::Hello() const {
  api::WorkerHello h;
  h.info = options_.info;
  api::WorkerInfo& info = h.info;
  const std::set<std::string> withdrawn = worker_->WithdrawnModels();
  info.models.erase(
      std::remove_if(info.models.begin(), info.models.end(),
                     [&](const api::ModelOffer& m) { return withdrawn.count(m.name) != 0; }),
      info.models.end());
  const std::map<std::string, std::string> unhealthy = worker_->UnhealthyModels();
  for (api::ModelOffer& m : info.models) {
    auto it = unhealthy.find(m.name);
    if (it != unhealthy.end()) m.unhealthy = it->second;
  }
  info.open_model = worker_->OpenModel();
  // Batches still running here, and batches whose results wait in the
  // queue: the scheduler keeps their leases, so the results count.
  std::set<int64_t> batches;
  for (int64_t batch : worker_->RunningBatches()) batches.insert(batch);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const v1::WorkerMessage& m : queue_) {
      for (const auto& r : m.results().results()) batches.insert(r.batch_id());
    }
  }
  h.running_batches.assign(batches.begin(), batches.end());
  h.version = options_.version;
  v1::WorkerMessage m;
  wire::ToProto(h, m.mutable_hello());
  return m;
}

bool Session::Write(const v1::WorkerMessage& message) {
  std::lock_guard<std::timed_mutex> lock(write_mu_);
  return stream_ != nullptr && !writes_done_ && stream_->Write(message);
}

void Session::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return !connected_ || !queue_.empty(); });
    if (!connected_) return;
    v1::WorkerMessage next = std::move(queue_.front());
    queue_.pop_front();
    // Results wait in unacked_ from before the write: the scheduler's
    // acknowledgement may arrive before this thread runs again.
    if (next.has_results()) unacked_.push_back(next);
    lock.unlock();
    const bool written = Write(next);
    if (written && next.has_results()) LogLine("results sent: " + Summary(next.results()));
    lock.lock();
    if (!written) {
      // The stream broke: results are resent from unacked_ after the break,
      // a pass report unless a newer one is kept, anything else goes first on
      // the next attach.
      if (next.has_pass()) {
        if (!latest_pass_) latest_pass_ = std::move(next);
      } else if (!next.has_results()) {
        queue_.push_front(std::move(next));
      }
      return;
    }
    cv_.notify_all();
  }
}

void Session::Acknowledge(const v1::ResultsStored& stored) {
  const std::set<int64_t> ids(stored.job_ids().begin(), stored.job_ids().end());
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::WorkerMessage& m : unacked_) {
    auto* results = m.mutable_results()->mutable_results();
    results->erase(
        std::remove_if(results->begin(), results->end(),
                       [&](const v1::JobResultReport& r) { return ids.count(r.job_id()) != 0; }),
        results->end());
  }
  unacked_.erase(
      std::remove_if(unacked_.begin(), unacked_.end(),
                     [](const v1::WorkerMessage& m) { return m.results().results_size() == 0; }),
      unacked_.end());
  cv_.notify_all();
}

void Session::Queue(v1::WorkerMessage message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (message.has_pass() && !connected_) {  // it stands for the reports before it
    latest_pass_ = std::move(message);
    return;
  }
  if (!connected_ && message.has_results()) {
    LogLine("results kept for the reconnect: " + Summary(message.results()));
  }
  queue_.push_back(std::move(message));
  cv_.notify_all();
}

void Session::SendPass(const api::PassProgress& pass) {
  v1::WorkerMessage m;
  wire::ToProto(pass, m.mutable_pass());
  Queue(std::move(m));
}

void Session::SendResults(std::vector<JobOutcome> results) {
  v1::WorkerMessage m;
  for (const JobOutcome& outcome : results)
    wire::ToProto(outcome, m.mutable_results()->add_results());
  Queue(std::move(m));
}

void Session::SendHandBack(int64_t batch_id, std::vector<int64_t> job_ids, bool draining) {
  v1::WorkerMessage m;
  v1::HandBack* back = m.mutable_hand_back();
  back->set_batch_id(batch_id);
  for (int64_t id : job_ids) back->add_job_ids(id);
  back->set_draining(draining);
  Queue(std::move(m));
}

void Session::SendCouldNotRun(int64_t batch_id, std::vector<int64_t> job_ids,
                              const std::string& error) {
  v1::WorkerMessage m;
  v1::HandBack* back = m.mutable_hand_back();
  back->set_batch_id(batch_id);
  for (int64_t id : job_ids) back->add_job_ids(id);
  back->set_error(error);
  Queue(std::move(m));
}

void Session::SendModelHealth(const std::string& model, const std::string& unhealthy) {
  v1::WorkerMessage m;
  m.mutable_model_health()->set_model(model);
  m.mutable_model_health()->set_unhealthy(unhealthy);
  Queue(std::move(m));
}

void Session::SendWithdraw(const std::string& model, const std::string& reason) {
  v1::WorkerMessage m;
  m.mutable_withdraw()->set_model(model);
  m.mutable_withdraw()->set_reason(reason);
  Queue(std::move(m));
}

}  // namespace nightshift::worker
