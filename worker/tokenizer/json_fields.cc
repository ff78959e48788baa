#include "worker/tokenizer/json_fields.h"

#include "worker/tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

Status WrongType(const std::string& where, const char* key, const char* expected) {
  return InvalidArgument(where + "." + key + ": expected " + expected);
}

bool Absent(const Json& spec, const char* key) {
  auto it = spec.find(key);
  return it == spec.end() || it->is_null();
}

}  // namespace

StatusOr<std::string> TypeField(const Json& spec, const std::string& where) {
  if (!spec.is_object()) return InvalidArgument(where + ": expected an object");
  return StringField(spec, "type", where);
}

StatusOr<std::string> StringField(const Json& spec, const char* key, const std::string& where) {
  auto it = spec.find(key);
  if (it == spec.end()) return InvalidArgument(where + ": missing field '" + key + "'");
  if (!it->is_string()) return WrongType(where, key, "a string");
  return it->get<std::string>();
}

StatusOr<std::string> OptionalStringField(const Json& spec, const char* key,
                                          const std::string& fallback, const std::string& where) {
  if (Absent(spec, key)) return fallback;
  return StringField(spec, key, where);
}

StatusOr<bool> BoolField(const Json& spec, const char* key, bool fallback,
                         const std::string& where) {
  if (Absent(spec, key)) return fallback;
  const Json& value = spec.at(key);
  if (!value.is_boolean()) return WrongType(where, key, "true or false");
  return value.get<bool>();
}

StatusOr<int64_t> CountField(const Json& spec, const char* key, int64_t fallback,
                             const std::string& where) {
  if (Absent(spec, key)) return fallback;
  const Json& value = spec.at(key);
  if (!value.is_number_unsigned()) return WrongType(where, key, "a non-negative integer");
  return value.get<int64_t>();
}

StatusOr<std::string> CharField(const Json& spec, const char* key, const std::string& where) {
  NS_ASSIGN_OR_RETURN(std::string text, StringField(spec, key, where));
  NS_RETURN_IF_ERROR(ValidateUtf8(text).Prefixed(where + "." + key));
  size_t length = 0;
  if (!text.empty()) DecodeUtf8(text, 0, &length);
  if (text.empty() || length != text.size()) return WrongType(where, key, "a single character");
  return text;
}

StatusOr<Regex> PatternField(const Json& spec, const char* key, const std::string& where) {
  auto it = spec.find(key);
  if (it == spec.end()) return InvalidArgument(where + ": missing field '" + key + "'");
  const Json& pattern = *it;
  std::string at = where + "." + key;
  if (pattern.is_object() && pattern.size() == 1) {
    if (pattern.contains("String") && pattern["String"].is_string()) {
      return Regex::Literal(pattern["String"].get<std::string>());
    }
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      StatusOr<Regex> regex = Regex::Compile(pattern["Regex"].get<std::string>());
      if (!regex.ok()) return regex.status().Prefixed(at);
      return regex;
    }
  }
  return InvalidArgument(at + ": expected {\"String\": ...} or {\"Regex\": ...}");
}

Status UnsupportedType(const std::string& where, const std::string& type) {
  return Unimplemented(where + ": type '" + type + "' is not supported");
}

}  // namespace nightshift::tokenizer
