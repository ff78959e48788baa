// ETAs of the live state: the fleet's running batches and the queue read from
// the store, turned into one model's EtaSnapshot and played out by Forecast
// (scheduler/eta.h) the way the workers run them.
//
// Thread-safety: reads `fleet` and `store`; the caller holds the Scheduler's
// mutex (the fleet's guard). The store serialises its own reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "scheduler/eta.h"
#include "scheduler/fleet.h"
#include "scheduler/store.h"

namespace nightshift::scheduler {

// What a live ETA needs besides the fleet and the store.
struct EtaContext {
  int64_t now_ms = 0;
  int eta_window = 100'000;  // queued jobs per model played out
  // Per submission, how its finished generation jobs stopped (the running
  // jobs' tokens are added from the fleet); nullptr: none.
  const std::map<int64_t, StopStats>* stops = nullptr;
  // Of the queued jobs played out, the first this many carry their prompt
  // ids, so their shared prefixes are priced once; the rest are priced whole.
  int prompt_ids_window = 4096;
  int64_t min_shared_prefix_tokens = kDefaultMinSharedPrefixTokens;
};

// `model`'s running batches and its first `eta_window` queued jobs, with the
// workers serving it. Fails when the queue cannot be read.
StatusOr<EtaSnapshot> ModelSnapshot(const Fleet& fleet, Store& store, const std::string& model,
                                    const EtaContext& context);

// Seconds until every job of `submission` is finished: 0 when it is done;
// unknown (nullopt) while it is open, while jobs wait for a tokenizer
// (`waiting_for_tokenizer`), when a job has no worker with a known speed, when
// a queued job lies beyond the first `eta_window` jobs of its model's queue,
// or when the queue cannot be read.
std::optional<double> SubmissionEta(const Fleet& fleet, Store& store, const Submission& submission,
                                    int64_t waiting_for_tokenizer, const EtaContext& context);

// The latest finish time among `model`'s jobs in batches and in the queue;
// unknown when it has none, when one has no worker with a known speed, or
// when its queue is unreadable or longer than `eta_window`.
std::optional<double> ModelEta(const Fleet& fleet, Store& store, const std::string& model,
                               const EtaContext& context);

// Reuses costly forecasts. A forecast plays a model's queue out, up to
// `eta_window` jobs: about a tenth of a second at 100,000 queued jobs, under
// the scheduler's lock. Recomputed at every status poll (a client polling
// every 100 ms), it held the lock most of the time and starved the workers'
// reports. A forecast that cost at least kMinCost is reused, counted down by
// the time since, until kReuseFactor times its cost has passed; so a polled
// forecast takes at most 1/kReuseFactor of the scheduler's time. Cheaper ones
// are always recomputed.
//
// The cost is CPU time on the steady clock; the age is read off the
// scheduler's clock (`now_ms`), the one the forecast itself counts in, so a
// test whose clock runs faster than the wall sees the forecast expire as
// often in its own time as production does in real time.
class ForecastCache {
 public:
  static constexpr std::chrono::milliseconds kMinCost{5};
  static constexpr int kReuseFactor = 20;

  // The forecast for `key` ("submission 7", "model m") at `now_ms` on the
  // scheduler's clock: `compute`'s, or a costly one computed less than
  // kReuseFactor times its cost ago, minus the seconds since.
  std::optional<double> Get(const std::string& key, int64_t now_ms,
                            const std::function<std::optional<double>()>& compute);
  void Forget(const std::string& key) { entries_.erase(key); }
  // Every forecast: the fleet changed (a worker attached or left), which
  // none of them saw.
  void Clear() { entries_.clear(); }

 private:
  struct Entry {
    int64_t at_ms;
    int64_t reuse_ms;  // kReuseFactor times the cost
    std::optional<double> eta;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace nightshift::scheduler
