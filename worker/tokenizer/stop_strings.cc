#include "worker/tokenizer/stop_strings.h"

#include <algorithm>
#include <utility>

namespace nightshift::tokenizer {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (std::string& stop : stop_strings) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

size_t StopStringMatcher::HeldBackLength() const {
  size_t held = 0;
  for (const std::string& stop : stops_) {
    size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t length = longest; length > held; --length) {
      if (pending_.compare(pending_.size() - length, length, stop, 0, length) == 0) {
        held = length;
        break;
      }
    }
  }
  return held;
}

StopStringMatcher::Result StopStringMatcher::Feed(std::string_view text) {
  Result result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  // A stop string can only begin in what was held back or in the new text.
  pending_.append(text);
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    result.text = pending_.substr(0, first);
    result.stopped = stopped_ = true;
    pending_.clear();
    return result;
  }
  size_t emit = pending_.size() - HeldBackLength();
  result.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return result;
}

std::string StopStringMatcher::Finish() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace nightshift::tokenizer
