// Internal to ns_checkpoint: quoting names read from untrusted files into
// one-line error messages.
#pragma once

#include <string>
#include <string_view>

namespace nightshift::checkpoint {

// Returns `text` in single quotes with control and non-ASCII bytes written as
// \xNN, quotes and backslashes escaped, and anything past 200 bytes replaced
// by "...". The result never contains a newline. Pure; thread-safe.
std::string Quoted(std::string_view text);

}  // namespace nightshift::checkpoint
