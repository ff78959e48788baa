// Typed reads of tokenizer.json fields with errors that say where the bad
// field is ("pre_tokenizer.pretokenizers[1].behavior: expected a string").
// Internal to the tokenizer library.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/tokenizer/regex.h"

namespace nightshift::tokenizer {

using Json = nlohmann::json;

// The component's "type" string; InvalidArgument when missing or not a string.
StatusOr<std::string> TypeField(const Json& spec, const std::string& where);

// A required string field.
StatusOr<std::string> StringField(const Json& spec, const char* key, const std::string& where);
// An optional string field: `fallback` when absent or null.
StatusOr<std::string> OptionalStringField(const Json& spec, const char* key,
                                          const std::string& fallback, const std::string& where);
// An optional boolean: `fallback` when absent or null.
StatusOr<bool> BoolField(const Json& spec, const char* key, bool fallback,
                         const std::string& where);
// An optional non-negative integer: `fallback` when absent or null.
StatusOr<int64_t> CountField(const Json& spec, const char* key, int64_t fallback,
                             const std::string& where);
// A single character given as a one-character string (Metaspace's
// replacement, CharDelimiterSplit's delimiter), as UTF-8.
StatusOr<std::string> CharField(const Json& spec, const char* key, const std::string& where);

// A `{"String": "..."}` or `{"Regex": "..."}` pattern (Split, Replace) as a
// regex; a String pattern matches literally.
StatusOr<Regex> PatternField(const Json& spec, const char* key, const std::string& where);

// A "type" this implementation does not support: Unimplemented naming it.
Status UnsupportedType(const std::string& where, const std::string& type);

}  // namespace nightshift::tokenizer
