// ETAs of the live state: how long until a submission's jobs, or a model's,
// are all finished, from the fleet's running batches (their jobs' passes left
// at their batch's pace) and the queue read from the store played out over the
// workers in dispatch order (scheduler/eta.h's QueueFinishTimes).
//
// Thread-safety: reads `fleet` and `store`; the caller holds the Scheduler's
// mutex (the fleet's guard). The store serialises its own reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "scheduler/fleet.h"
#include "scheduler/store.h"

namespace nightshift::scheduler {

// Seconds until every job of `submission` is finished: 0 when it is done;
// unknown (nullopt) while it is open, while jobs wait for a tokenizer
// (`waiting_for_tokenizer`), when a job has no worker with a known speed, when
// a queued job lies beyond the first `eta_window` jobs of its model's queue,
// or when the queue cannot be read.
std::optional<double> SubmissionEta(const Fleet& fleet, Store& store, const Submission& submission,
                                    int64_t waiting_for_tokenizer, int eta_window);

// The latest finish time among `model`'s jobs in batches and in the queue;
// unknown when it has none, when one has no worker with a known speed, or
// when its queue is unreadable or longer than `eta_window`.
std::optional<double> ModelEta(const Fleet& fleet, Store& store, const std::string& model,
                               int eta_window);

}  // namespace nightshift::scheduler
