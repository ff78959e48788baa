// How the scheduler commands reach the scheduler: the shared connection
// flags, where the token comes from, and the JobService stub.
//
// Precedence, highest first: the flag (--scheduler, --token, --tls,
// --tls-ca), the environment (NIGHTSHIFT_SCHEDULER, NIGHTSHIFT_TOKEN), the
// config file, the default (localhost:50051, no token, plaintext). The
// config file is $NIGHTSHIFT_CONFIG, else $XDG_CONFIG_HOME/nightshift/
// config.toml, else ~/.config/nightshift/config.toml; it holds `key = value`
// lines (TOML's basic subset) with keys scheduler, token, tls (true/false)
// and tls_ca; `#` starts a comment. A missing file is fine.
//
// Not thread-safe while flags are parsed; Dial's stub is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/command_line.h"
#include "common/status.h"
#include "nightshift.grpc.pb.h"
#include "proto/client.h"

namespace nightshift::cli {

struct ConnectionFlags {
  std::string scheduler;
  std::string token;
  bool tls = false;
  std::string tls_ca;
};

// Declares --scheduler, --token, --tls and --tls-ca on `flags`, writing to
// `out` (which must outlive the parse).
void AddConnectionFlags(CommandLine& flags, ConnectionFlags* out);

// The help text about the above, for a command's description.
extern const char kConnectionHelp[];

// Parses a config file's text. InvalidArgument naming the line for a line
// that is not `key = value` or names an unknown key.
StatusOr<std::map<std::string, std::string>> ParseConfig(const std::string& text);

// The config file's path as described above ("" when there is no HOME).
std::string ConfigPath();

// Resolves the connection options from the parsed flags (and which of them
// were given), the environment and the config file at `config_path`.
// InvalidArgument for a malformed config file or tls value.
StatusOr<api::ConnectOptions> ResolveConnection(const CommandLine& flags,
                                                const ConnectionFlags& given,
                                                const std::string& config_path);

// A connected client: the stub and the token to put on each call.
struct Client {
  std::unique_ptr<v1::JobService::Stub> stub;
  std::string token;

  // A context carrying the token, with a deadline `seconds` away (none when
  // seconds <= 0).
  std::unique_ptr<grpc::ClientContext> Context(double seconds = 30) const;
};

// Resolves the options (ResolveConnection with ConfigPath()) and connects
// lazily. NotFound for an unreadable CA file.
StatusOr<Client> Dial(const CommandLine& flags, const ConnectionFlags& given);

}  // namespace nightshift::cli
