#include "common/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace nightshift {
namespace {

StatusOr<int64_t> ParseInt(const std::string& text, const std::string& flag) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return InvalidArgument("--" + flag + ": expected an integer, got '" + text + "'");
  }
  return static_cast<int64_t>(v);
}

StatusOr<double> ParseDouble(const std::string& text, const std::string& flag) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    return InvalidArgument("--" + flag + ": expected a number, got '" + text + "'");
  }
  return v;
}

}  // namespace

FlagSet::FlagSet(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void FlagSet::Add(Flag flag) { flags_.push_back(std::move(flag)); }

void FlagSet::String(const std::string& name, std::string* out, std::string help,
                     std::string value_name) {
  Add({name, std::move(help), std::move(value_name), false, [out](const std::string& v) {
         *out = v;
         return Status::Ok();
       }});
}

void FlagSet::Int(const std::string& name, int64_t* out, std::string help, std::string value_name) {
  Add({name, std::move(help), std::move(value_name), false, [out, name](const std::string& v) {
         StatusOr<int64_t> parsed = ParseInt(v, name);
         if (!parsed.ok()) return parsed.status();
         *out = *parsed;
         return Status::Ok();
       }});
}

void FlagSet::Double(const std::string& name, double* out, std::string help,
                     std::string value_name) {
  Add({name, std::move(help), std::move(value_name), false, [out, name](const std::string& v) {
         StatusOr<double> parsed = ParseDouble(v, name);
         if (!parsed.ok()) return parsed.status();
         *out = *parsed;
         return Status::Ok();
       }});
}

void FlagSet::Bool(const std::string& name, bool* out, std::string help) {
  Add({name, std::move(help), "", true, [out, name](const std::string& v) {
         if (v == "true" || v == "1" || v == "yes") {
           *out = true;
         } else if (v == "false" || v == "0" || v == "no") {
           *out = false;
         } else {
           return InvalidArgument("--" + name + ": expected true or false, got '" + v + "'");
         }
         return Status::Ok();
       }});
}

void FlagSet::StringList(const std::string& name, std::vector<std::string>* out, std::string help,
                         std::string value_name) {
  Add({name, std::move(help), std::move(value_name) + " (repeatable)", false,
       [out](const std::string& v) {
         out->push_back(v);
         return Status::Ok();
       }});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::Seen(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.seen;
  }
  return false;
}

Status FlagSet::Parse(int argc, char** argv, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return Parse(args);
}

Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr && !has_value && name.compare(0, 3, "no-") == 0) {
      Flag* negated = Find(name.substr(3));
      if (negated != nullptr && negated->is_bool) {
        negated->seen = true;
        NS_RETURN_IF_ERROR(negated->set("false"));
        continue;
      }
    }
    if (flag == nullptr) return InvalidArgument("unknown flag --" + name + " (see --help)");
    flag->seen = true;
    if (flag->is_bool) {
      NS_RETURN_IF_ERROR(flag->set(has_value ? value : "true"));
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return InvalidArgument("--" + name + " needs a value");
      value = args[++i];
    }
    NS_RETURN_IF_ERROR(flag->set(value));
  }
  return Status::Ok();
}

std::string FlagSet::Help() const {
  std::ostringstream out;
  out << "usage: " << usage_ << "\n";
  if (!description_.empty()) out << "\n" << description_ << "\n";
  if (!flags_.empty()) {
    out << "\nflags:\n";
    for (const Flag& f : flags_) {
      std::string left = "  --" + f.name + (f.is_bool ? "" : " " + f.value_name);
      out << left;
      if (left.size() < 30) {
        out << std::string(30 - left.size(), ' ');
      } else {
        out << "\n" << std::string(30, ' ');
      }
      out << f.help << "\n";
    }
  }
  out << "  --help                      show this help and exit\n";
  return out.str();
}

StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  if (text.empty()) return InvalidArgument(what + ": empty list");
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    StatusOr<int64_t> v = ParseInt(item, what);
    if (!v.ok())
      return InvalidArgument(what + ": '" + item + "' in '" + text + "' is not an integer");
    out.push_back(*v);
  }
  if (!text.empty() && text.back() == ',') {
    return InvalidArgument(what + ": trailing comma in '" + text + "'");
  }
  return out;
}

}  // namespace nightshift
