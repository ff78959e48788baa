#include "cli/client/connection.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace nightshift::cli {
namespace {

std::string Trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// A TOML value: a "quoted" basic string (\" and \\ escapes) or a bare word.
StatusOr<std::string> Value(const std::string& raw, const std::string& where) {
  if (raw.empty() || raw.front() != '"') {
    const size_t comment = raw.find('#');
    return Trim(raw.substr(0, comment));
  }
  std::string value;
  for (size_t i = 1; i < raw.size(); ++i) {
    if (raw[i] == '\\' && i + 1 < raw.size()) {
      value += raw[++i];
    } else if (raw[i] == '"') {
      const std::string rest = Trim(raw.substr(i + 1));
      if (!rest.empty() && rest.front() != '#')
        return InvalidArgument(where + ": text after the value");
      return value;
    } else {
      value += raw[i];
    }
  }
  return InvalidArgument(where + ": unterminated string");
}

StatusOr<bool> ParseBool(const std::string& text, const std::string& what) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0" || text.empty()) return false;
  return InvalidArgument(what + ": '" + text + "' is not true or false");
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

const char kConnectionHelp[] =
    "Connection: --scheduler, else $NIGHTSHIFT_SCHEDULER, else `scheduler` in the config file, "
    "else localhost:50051. Token: --token, else $NIGHTSHIFT_TOKEN, else `token` in the config "
    "file. The config file is $NIGHTSHIFT_CONFIG, else $XDG_CONFIG_HOME/nightshift/config.toml, "
    "else ~/.config/nightshift/config.toml, with `key = \"value\"` lines for scheduler, token, "
    "tls (true/false) and tls_ca.\n"
    "Exit codes: 0 success, 1 the work failed (server error, a job failed), 2 usage error.";

void AddConnectionFlags(CommandLine& flags, ConnectionFlags* out) {
  flags.String("scheduler", &out->scheduler, "scheduler address (default localhost:50051)",
               "HOST:PORT");
  flags.String("token", &out->token, "client token (else $NIGHTSHIFT_TOKEN or the config file)",
               "TOKEN");
  flags.Bool("tls", &out->tls, "connect with TLS");
  flags.String("tls-ca", &out->tls_ca, "PEM root certificates for TLS (implies --tls)", "FILE");
}

StatusOr<std::map<std::string, std::string>> ParseConfig(const std::string& text) {
  static const std::set<std::string> kKeys = {"scheduler", "token", "tls", "tls_ca"};
  std::map<std::string, std::string> config;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string trimmed = Trim(line);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    const std::string where = "config line " + std::to_string(number);
    const size_t eq = trimmed.find('=');
    if (eq == std::string::npos) return InvalidArgument(where + ": not key = value");
    const std::string key = Trim(trimmed.substr(0, eq));
    if (kKeys.count(key) == 0) return InvalidArgument(where + ": unknown key '" + key + "'");
    NS_ASSIGN_OR_RETURN(config[key], Value(Trim(trimmed.substr(eq + 1)), where));
  }
  return config;
}

std::string ConfigPath() {
  if (!Env("NIGHTSHIFT_CONFIG").empty()) return Env("NIGHTSHIFT_CONFIG");
  if (!Env("XDG_CONFIG_HOME").empty()) return Env("XDG_CONFIG_HOME") + "/nightshift/config.toml";
  if (!Env("HOME").empty()) return Env("HOME") + "/.config/nightshift/config.toml";
  return "";
}

StatusOr<api::ConnectOptions> ResolveConnection(const CommandLine& flags,
                                                const ConnectionFlags& given,
                                                const std::string& config_path) {
  std::map<std::string, std::string> config;
  std::ifstream file(config_path);
  if (!config_path.empty() && file) {
    std::stringstream text;
    text << file.rdbuf();
    auto parsed = ParseConfig(text.str());
    if (!parsed.ok()) return InvalidArgument(config_path + ": " + parsed.status().message());
    config = std::move(parsed).value();
  }
  auto pick = [&](const char* flag, const std::string& flag_value, const char* env,
                  const char* key) -> std::string {
    if (flags.Seen(flag)) return flag_value;
    if (env != nullptr && !Env(env).empty()) return Env(env);
    auto it = config.find(key);
    return it != config.end() ? it->second : "";
  };
  api::ConnectOptions options;
  const std::string address =
      pick("scheduler", given.scheduler, "NIGHTSHIFT_SCHEDULER", "scheduler");
  if (!address.empty()) options.address = address;
  options.token = pick("token", given.token, "NIGHTSHIFT_TOKEN", "token");
  options.tls_ca_file = pick("tls-ca", given.tls_ca, nullptr, "tls_ca");
  if (flags.Seen("tls")) {
    options.tls = given.tls;
  } else {
    NS_ASSIGN_OR_RETURN(options.tls, ParseBool(config.count("tls") ? config["tls"] : "", "tls"));
  }
  if (!options.tls_ca_file.empty()) options.tls = true;
  return options;
}

std::unique_ptr<grpc::ClientContext> Client::Context(double seconds) const {
  auto context = std::make_unique<grpc::ClientContext>();
  api::AddToken(context.get(), token);
  if (seconds > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  }
  return context;
}

StatusOr<Client> Dial(const CommandLine& flags, const ConnectionFlags& given) {
  NS_ASSIGN_OR_RETURN(api::ConnectOptions options, ResolveConnection(flags, given, ConfigPath()));
  NS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, api::Connect(options));
  return Client{v1::JobService::NewStub(channel), options.token};
}

}  // namespace nightshift::cli
