// The gRPC front of the scheduler (callback API): JobService for clients,
// WorkerService for workers. Handlers are thin: check the bearer token,
// convert the request (wire.h), call the Scheduler, map the Status to a gRPC
// code (wire::ToGrpcStatus, the one mapping). Blocking work (SQLite writes)
// runs on the service's own threads, never on gRPC's callback threads.
//
// Thread-safety: the services are safe for gRPC to call concurrently. The
// Service must outlive the grpc::Server it is registered with (shut the
// server down first).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "scheduler/scheduler.h"

namespace nightshift::scheduler {

struct ServiceOptions {
  // Bearer tokens. Both empty: no authentication (the server then binds to
  // loopback only). A client token cannot attach as a worker; a worker
  // token cannot call JobService.
  std::string client_token;
  std::string worker_token;
  std::string version;
  int64_t schema_version = 0;
  int threads = 4;  // for handler work that blocks (SQLite)
  // Times each SubmitJobs call; nullptr = no metrics. Not owned; must
  // outlive the Service.
  SchedulerMetrics* metrics = nullptr;
};

class Service {
 public:
  // `scheduler` is not owned and must outlive the Service.
  Service(Scheduler* scheduler, ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  grpc::Service* job_service();
  grpc::Service* worker_service();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nightshift::scheduler
