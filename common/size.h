// Byte sizes as people write them on a command line: "8G", "512MiB", "2048".
//
// Thread-safety: a free function, no shared state.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace nightshift {

// A byte count ("2048") or a number, possibly with a fraction ("1.5"),
// followed by K, M, G or T (powers of 1024), each optionally followed by "i",
// "B" or "iB"; a plain "B" is a byte count. Case-insensitive; no spaces.
// InvalidArgument quoting the text for anything else, a size that rounds down
// to zero bytes, or one that does not fit 64 bits.
StatusOr<uint64_t> ParseSize(std::string_view text);

}  // namespace nightshift
