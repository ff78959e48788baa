// Persistent encodings of the domain types the store keeps as blobs: job
// specs and outputs as JSON, token ids as packed little-endian int32.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "scheduler/types.h"

namespace nightshift::scheduler {

nlohmann::json SpecToJson(const JobSpec& spec);
// DataLoss naming the field when the JSON is not a spec this code wrote.
StatusOr<JobSpec> SpecFromJson(const nlohmann::json& json);

nlohmann::json OutputToJson(const JobOutput& output);
StatusOr<JobOutput> OutputFromJson(const nlohmann::json& json);

std::string PackTokens(const std::vector<int32_t>& ids);
// DataLoss when the size is not a multiple of 4.
StatusOr<std::vector<int32_t>> UnpackTokens(std::string_view blob);

// Parses JSON text; DataLoss naming `what` on malformed text.
StatusOr<nlohmann::json> ParseStoredJson(const std::string& text, const char* what);

}  // namespace nightshift::scheduler
