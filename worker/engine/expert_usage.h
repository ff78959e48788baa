// A mixture of experts' measured routing, and what a memory budget pins by
// it. The engine counts the rows routed to each expert of each sparse layer
// as passes run and keeps the counts in its state directory (the worker's,
// or `run --state-dir`), so that the next engine of the same checkpoint
// pins by them from its first pass: under a memory budget every group a
// pass always reads (the layers' dense parts, the LM head) is pinned first,
// then the expert slices whose experts the routing used most per byte.
//
// libtorch-free; pure functions but for the file reads and writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/model_facts.h"

namespace nightshift::engine {

// Rows routed to each expert, per decoder layer (empty for a dense layer).
using ExpertUsage = std::vector<std::vector<uint64_t>>;

// "<state_dir>/expert-usage-<hash of checkpoint_dir>.json".
std::string ExpertUsagePath(const std::string& state_dir, const std::string& checkpoint_dir);

// The counts in `path` when it holds them for this shape (one list per
// layer, each empty or `experts` long); nullopt when absent, unreadable or
// of another shape.
std::optional<ExpertUsage> ReadExpertUsage(const std::string& path, int64_t layers,
                                           int64_t experts);

// Writes `usage` to `path` (a temporary file renamed over it); false when
// that fails (the counts are a hint: the caller goes on).
bool WriteExpertUsage(const std::string& path, const ExpertUsage& usage);

// The groups (of `group_bytes`) a budget of `budget_bytes` pins: those
// `always_read` marks first, in `placement` order among themselves
// (planner::ChoosePinnedGroups), then the others by `use` per byte,
// highest first (ties: earlier groups first), each while it fits.
std::vector<bool> ChooseExpertAwarePins(const std::vector<uint64_t>& group_bytes,
                                        const std::vector<bool>& always_read,
                                        const std::vector<uint64_t>& use, uint64_t budget_bytes,
                                        planner::PinPlacement placement);

}  // namespace nightshift::engine
