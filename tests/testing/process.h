// Child processes for the integration tests: start a binary,
// wait for a line on its standard output, signal it, reap it. Standard error
// goes to a log file the test can print when it fails. A Process still
// running when destroyed is killed (SIGKILL) and reaped.
//
// Not thread-safe; one owner per process.
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/paths.h"

extern char** environ;

namespace nightshift::testutil {

class Process {
 public:
  // Starts argv[0] (a path) with the arguments; stderr is appended to
  // `log_path`. Returns nullptr when it cannot be started.
  static std::unique_ptr<Process> Start(const std::vector<std::string>& argv,
                                        const std::string& log_path) {
    int out[2];
    if (pipe(out) != 0) return nullptr;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc != 0) {
      close(out[0]);
      return nullptr;
    }
    return std::unique_ptr<Process>(new Process(pid, out[0], log_path));
  }

  ~Process() {
    if (running_) {
      kill(pid_, SIGKILL);
      Reap(-1);
    }
    close(stdout_);
  }

  // Reads standard output until a line containing `needle` (returned) or
  // the timeout / end of output ("" then).
  std::string WaitForLine(const std::string& needle, double timeout_seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds);
    while (true) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        if (line.find(needle) != std::string::npos) return line;
        continue;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return "";
      pollfd fd{stdout_, POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(stdout_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  void Signal(int signal_number) {
    if (running_) kill(pid_, signal_number);
  }

  // Waits for the exit: the exit code, 128 + signal when killed, or -1 on
  // timeout (the process is then killed).
  int Wait(double timeout_seconds) { return Reap(timeout_seconds); }

  pid_t pid() const { return pid_; }
  bool running() const { return running_; }
  // True while the process runs; once it has ended, reaps it (Wait then
  // returns its exit) and is false.
  bool Alive() {
    if (!running_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    running_ = false;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  using Clock = std::chrono::steady_clock;

  Process(pid_t pid, int stdout_fd, std::string log_path)
      : pid_(pid), stdout_(stdout_fd), log_path_(std::move(log_path)) {}

  int Reap(double timeout_seconds) {
    if (!running_) return exit_code_;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds);
    int status = 0;
    while (true) {
      const pid_t done = waitpid(pid_, &status, timeout_seconds < 0 ? 0 : WNOHANG);
      if (done == pid_) break;
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        running_ = false;
        exit_code_ = -1;
        return -1;
      }
      usleep(10'000);
    }
    running_ = false;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

  pid_t pid_;
  int stdout_;
  std::string log_path_;
  std::string buffer_;
  bool running_ = true;
  int exit_code_ = 0;
};

// nightshift-scheduler's command line for a test: listening on `listen`,
// its database at `db`, leases of `lease_seconds`, heartbeats every
// `heartbeat_seconds`. Further flags go after it.
inline std::vector<std::string> SchedulerArgv(const std::string& db,
                                              const std::string& lease_seconds,
                                              const std::string& heartbeat_seconds = "0.2",
                                              const std::string& listen = "127.0.0.1:0") {
  return {BinPath("nightshift-scheduler"),
          "--listen",
          listen,
          "--db",
          db,
          "--lease-seconds",
          lease_seconds,
          "--heartbeat-seconds",
          heartbeat_seconds};
}

// Waits for nightshift-scheduler's "listening on HOST:PORT ..." line on the
// standard output of `scheduler` and returns HOST:PORT; "" when it does not
// come within `timeout_seconds`.
inline std::string WaitForListenAddress(Process& scheduler, double timeout_seconds) {
  const std::string needle = "listening on ";
  const std::string line = scheduler.WaitForLine(needle, timeout_seconds);
  if (line.empty()) return "";
  const size_t at = line.find(needle) + needle.size();
  return line.substr(at, line.find(' ', at) - at);
}

// The port of the first "NEEDLE HOST:PORT" line in the log (standard error)
// of `p`, e.g. "metrics listening on ", waiting up to `timeout_seconds`; 0
// when none comes.
inline int WaitForLogPort(const Process& p, const std::string& needle, double timeout_seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string log = p.Log();
    const size_t at = log.find(needle);
    const size_t end = at == std::string::npos ? at : log.find('\n', at);
    if (end != std::string::npos) {
      const std::string where = log.substr(at + needle.size(), end - at - needle.size());
      return std::atoi(where.substr(where.rfind(':') + 1).c_str());
    }
    usleep(20'000);
  }
  return 0;
}

// `text` single-quoted for /bin/sh.
inline std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A shell command's exit code (-1 when it could not run or was killed) and
// output.
struct ShellOutcome {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `command_line` with /bin/sh: standard output is captured, standard
// error goes to the file `stderr_path` and is returned too.
inline ShellOutcome RunShell(const std::string& command_line, const std::string& stderr_path) {
  const std::string command = command_line + " 2>" + ShellQuote(stderr_path);
  ShellOutcome run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = ReadFile(stderr_path);
  return run;
}

}  // namespace nightshift::testutil
