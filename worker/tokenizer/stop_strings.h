// Stop strings on streamed, decoded text.
//
// Generation stops when the decoded output contains one of the job's stop
// strings, even when the string arrives split over several tokens. The
// matcher holds back the tail of the text that could still grow into a stop
// string and releases it once it cannot; the text it returns never includes
// a stop string or anything after one.
//
// Not thread-safe: one matcher per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nightshift::tokenizer {

class StopStringMatcher {
 public:
  // Empty strings in `stop_strings` are ignored (they would stop every
  // stream before its first character).
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; `text` ends right before it
  };

  // Appends decoded text (whole UTF-8 characters, e.g. from
  // IncrementalDecoder) and returns what can be emitted. After a result with
  // `stopped`, every further call returns empty text with `stopped` set.
  Result Feed(std::string_view text);

  // End of stream without a stop: returns the held-back tail.
  std::string Finish();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of a
  // stop string.
  size_t HeldBackLength() const;

  std::vector<std::string> stops_;
  std::string pending_;  // held back: could be the start of a stop string
  bool stopped_ = false;
};

}  // namespace nightshift::tokenizer
