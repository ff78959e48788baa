#include "common/command_line.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/size.h"

namespace nightshift {
namespace {

std::string Dashed(const std::string& name) { return "--" + name; }

StatusOr<int64_t> ParseInt(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return InvalidArgument(what + ": expected an integer, got '" + text + "'");
  }
  return static_cast<int64_t>(v);
}

// CLI11 validators return "" for a good value, else the reason.
CLI::Validator Finite() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
          return "expected a number, got '" + text + "'";
        }
        return "";
      },
      "");
}

CLI::Validator ByteCount() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        StatusOr<uint64_t> bytes = ParseSize(text);
        if (!bytes.ok()) return bytes.status().message();
        text = std::to_string(*bytes);  // what the option then stores
        return "";
      },
      "");
}

// The synopsis is the description's first line: no second usage line. An
// option reads "--name VALUE" (a negatable flag "--name, --no-name"); its
// environment variable and repetition are in the description.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return ""; }
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional) return opt->get_name(true, false);
    std::string out;
    for (const std::string& s : opt->get_snames()) out += (out.empty() ? "-" : ", -") + s;
    for (const std::string& l : opt->get_lnames()) out += (out.empty() ? "--" : ", --") + l;
    return out;
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0 || opt->get_type_name().empty()) return "";
    return " " + opt->get_type_name();
  }
};

}  // namespace

CommandLine::CommandLine(std::string usage, std::string description)
    : app_(std::make_unique<CLI::App>("usage: " + usage +
                                      (description.empty() ? "" : "\n\n" + description))) {
  // A flag given twice takes its last value (CLI11 would refuse it); a
  // repeatable one (StringList) keeps every value.
  app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_->set_help_flag();  // -h/--help set help_requested() instead of throwing
  app_->add_flag("-h,--help", help_requested_, "show this help and exit");
  app_->add_option("args", positional_)
      ->expected(0, -1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group("");  // hidden
  auto formatter = std::make_shared<Formatter>();
  formatter->column_width(32);
  app_->formatter(formatter);
}

CommandLine::~CommandLine() = default;
CommandLine::CommandLine(CommandLine&&) noexcept = default;
CommandLine& CommandLine::operator=(CommandLine&&) noexcept = default;

void CommandLine::String(const std::string& name, std::string* out, std::string help,
                         std::string value_name) {
  app_->add_option(Dashed(name), *out, std::move(help))->type_name(std::move(value_name));
  names_.push_back(name);
}

void CommandLine::Int(const std::string& name, int64_t* out, std::string help,
                      std::string value_name) {
  app_->add_option(Dashed(name), *out, std::move(help))->type_name(std::move(value_name));
  names_.push_back(name);
}

void CommandLine::Double(const std::string& name, double* out, std::string help,
                         std::string value_name) {
  app_->add_option(Dashed(name), *out, std::move(help))
      ->type_name(std::move(value_name))
      ->check(Finite());
  names_.push_back(name);
}

void CommandLine::Bool(const std::string& name, bool* out, std::string help) {
  app_->add_flag(Dashed(name) + ",!--no-" + name, *out, std::move(help));
  names_.push_back(name);
}

void CommandLine::StringList(const std::string& name, std::vector<std::string>* out,
                             std::string help, std::string value_name) {
  if (help.find("repeatable") == std::string::npos) help += " (repeatable)";
  app_->add_option(Dashed(name), *out, help)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name(std::move(value_name))
      ->allow_extra_args(false);  // one value per occurrence; a later word is positional
  names_.push_back(name);
}

void CommandLine::Choice(const std::string& name, std::string* out,
                         const std::vector<std::string>& choices, std::string help) {
  std::string names;
  for (const std::string& c : choices) names += (names.empty() ? "" : "|") + c;
  app_->add_option(Dashed(name), *out, std::move(help))
      ->type_name(names)
      ->check(CLI::IsMember(choices));
  names_.push_back(name);
}

void CommandLine::Size(const std::string& name, uint64_t* out, std::string help) {
  app_->add_option(Dashed(name), *out, std::move(help))->type_name("SIZE")->transform(ByteCount());
  names_.push_back(name);
}

void CommandLine::Env(const std::string& name, const std::string& var) {
  CLI::Option* option = Find(name);
  if (option == nullptr) return;
  option->envname(var);
  option->description(option->get_description() + " [env " + var + "]");
}

void CommandLine::ConfigFile() {
  app_->set_config("--config", "", "read flags from this TOML file (`flag-name = value` lines)")
      ->type_name("FILE");
  app_->allow_config_extras(CLI::config_extras_mode::error);
  names_.push_back("config");
}

CLI::Option* CommandLine::Find(const std::string& name) const {
  try {
    return app_->get_option_no_throw(Dashed(name));
  } catch (const CLI::Error&) {
    return nullptr;
  }
}

Status CommandLine::Parse(int argc, char** argv, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return Parse(args);
}

Status CommandLine::Parse(const std::vector<std::string>& args) {
  // CLI11 takes the arguments last first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app_->parse(reversed);
  } catch (const CLI::ExtrasError& e) {
    if (help_requested_) return Status::Ok();
    std::string first;
    for (const std::string& a : app_->remaining()) {
      if (a.size() > 1 && a[0] == '-') {
        first = a.substr(0, a.find('='));
        break;
      }
    }
    if (!first.empty()) return InvalidArgument("unknown flag " + first + " (see --help)");
    return InvalidArgument(e.what());
  } catch (const CLI::ParseError& e) {
    if (help_requested_) return Status::Ok();
    return InvalidArgument(e.what());
  }
  return Status::Ok();
}

bool CommandLine::Seen(const std::string& name) const {
  const CLI::Option* option = Find(name);
  return option != nullptr && option->count() > 0;
}

std::string CommandLine::Help() const { return app_->help(); }

std::vector<std::string> CommandLine::FlagNames() const { return names_; }

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
  if (text.back() == ',') return InvalidArgument(what + ": trailing comma in '" + text + "'");
  return out;
}

}  // namespace nightshift
