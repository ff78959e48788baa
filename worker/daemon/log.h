// The worker's log: one line per event on standard error, prefixed with the
// UTC time and "nightshift-worker". Thread-safe (lines never interleave).
#pragma once

#include <string>

namespace nightshift::worker {

void LogLine(const std::string& line);

}  // namespace nightshift::worker
