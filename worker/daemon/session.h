// The worker's one Attach stream to the scheduler, kept up for the life of
// the process.
//
// A connection thread attaches (hello: the worker's figures, its models, the
// batch it still runs and the model it has open), reads the welcome, uploads
// the tokenizers the welcome lists as missing, then hands every assignment
// and cancel to the Worker. A heartbeat thread writes a heartbeat every
// welcome interval, which extends the lease whatever a pass costs. When the
// stream ends the session reconnects with exponential backoff (0.5 s
// doubling, capped at `max_backoff_seconds`); while Stop waits to deliver
// results, it retries every half second.
//
// As the Worker's SchedulerLink it never waits for the network: every
// message is queued and a writer thread of the attached stream writes them
// in order. While disconnected only the newest pass report is kept (each
// carries every job's tokens so far, so it stands for the ones before it)
// and written on the next attach; results, hand-backs and withdrawals are
// kept and written as soon as a stream is attached, so results finished
// while the scheduler was away are sent on reconnect. Results written are
// kept until the scheduler says it stored them (ResultsStored): a write that
// returns has only reached the transport, and a scheduler that dies before
// its commit would otherwise lose them. When the stream ends, the results not yet
// acknowledged go back to the front of the queue; a scheduler that cannot
// store them (its disk is full) ends the stream for that, and the
// reconnects back off until it can. The hello of a
// reconnect lists the batch still running and every batch with results to
// (re)send, so the scheduler keeps those leases (its lease rules decide
// whether the results count: a lease that expired meanwhile refuses them;
// one stored already refuses the copy).
//
// Thread-safety: the SchedulerLink methods may be called from any thread;
// Start and Stop from the owning thread, once each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "nightshift.grpc.pb.h"
#include "proto/client.h"
#include "worker/daemon/worker.h"

namespace nightshift::worker {

struct SessionOptions {
  api::ConnectOptions connect;
  // The hello's fixed part; models are filtered by the worker's withdrawn set.
  api::WorkerInfo info;
  // Tokenizer files by hash, for the welcome's missing list.
  std::map<std::string, api::TokenizerFiles> tokenizers;
  double initial_backoff_seconds = 0.5;
  double max_backoff_seconds = 30;
  std::string version;
};

class Session : public SchedulerLink {
 public:
  // `worker` receives the scheduler's commands and must outlive the session.
  Session(SessionOptions options, Worker* worker);
  ~Session() override;

  // Starts the connection thread. NotFound when the TLS CA file cannot be read.
  Status Start();
  // Waits up to `flush_seconds` for queued messages to be written (while
  // disconnected, only when results are among them: a reconnect, tried at
  // once and then every half second, may still deliver them), closes the
  // stream and joins the threads. A write still
  // stuck then (a scheduler that does not read) is cancelled with the call,
  // so Stop returns within about flush_seconds + 3 s.
  void Stop(double flush_seconds);

  // True while a stream is attached (welcome received).
  bool connected() const;

  void SendPass(const api::PassProgress& pass) override;
  void SendResults(std::vector<JobOutcome> results) override;
  void SendHandBack(int64_t batch_id, std::vector<int64_t> job_ids, bool draining) override;
  void SendWithdraw(const std::string& model, const std::string& reason) override;
  void SendCouldNotRun(int64_t batch_id, std::vector<int64_t> job_ids,
                       const std::string& error) override;
  void SendModelHealth(const std::string& model, const std::string& unhealthy) override;

 private:
  using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::SchedulerMessage>;

  void ConnectionLoop();
  // One attach: returns when the stream ends; `attached` says whether a
  // welcome arrived.
  grpc::Status AttachOnce(bool* attached);
  void HeartbeatLoop(double interval_seconds);
  // Writes queued messages in order while connected.
  void WriterLoop();
  v1::WorkerMessage Hello() const;
  void Queue(v1::WorkerMessage message);
  // Ends writing on the stream (WritesDone), or cancels the call when a
  // write is stuck.
  void CloseWrites();
  bool Write(const v1::WorkerMessage& message);
  // Forgets the written results the scheduler stored.
  void Acknowledge(const v1::ResultsStored& stored);

  SessionOptions options_;
  Worker* worker_;
  std::shared_ptr<grpc::Channel> channel_;
  std::thread connection_thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool flushing_ = false;  // Stop is waiting for the queue to be written
  bool connected_ = false;
  grpc::ClientContext* context_ = nullptr;        // of the current stream
  std::deque<v1::WorkerMessage> queue_;           // every message but heartbeats, in order
  std::deque<v1::WorkerMessage> unacked_;         // results taken for writing, not yet stored
  std::optional<v1::WorkerMessage> latest_pass_;  // while disconnected: the newest pass report

  std::timed_mutex write_mu_;  // one writer at a time on the stream
  Stream* stream_ = nullptr;   // guarded by write_mu_
  bool writes_done_ = false;   // guarded by write_mu_; no Write after WritesDone
};

}  // namespace nightshift::worker
