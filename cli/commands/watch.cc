// `nightshift watch SUBMISSION`: follows a submission until it is done.
//
// On a terminal a one-line progress bar is redrawn in place (jobs done/total,
// each running batch's pass and seconds per pass, marked "measured" once it is
// the figure the ETA rests on, the ETA as a duration and a clock time);
// otherwise one plain line per change. Ends with the outcome
// line and exits 0 when every job succeeded, 1 when any failed or was
// cancelled (or the stream broke).
#if NIGHTSHIFT_HAVE_CLI_CLIENT
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include "cli/client/command_util.h"
#include "cli/client/connection.h"
#include "cli/client/progress.h"
#include "cli/command.h"

namespace nightshift::cli {
namespace {

constexpr const char* kName = "watch";

struct WatchFlags {
  ConnectionFlags connection;
  bool json = false;
  bool utc = false;
  bool plain = false;
  double reconnect_seconds = 60;
};

int TerminalWidth() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

// Prints one event the way the flags and the terminal ask; `last` is the
// previous plain line, so unchanged lines are not repeated.
void Show(const v1::SubmissionEvent& event, const WatchFlags& f, bool terminal, std::string* last) {
  const v1::Submission& s = event.submission();
  if (f.json) {
    std::cout << MessageJson(event) << std::endl;
    return;
  }
  if (terminal) {
    std::cout << "\r" << RenderProgressBar(s, TerminalWidth() - 1, NowMs(), f.utc) << "\x1b[K"
              << std::flush;
    return;
  }
  std::string line = RenderProgressLine(s, NowMs(), f.utc);
  if (line != *last) std::cout << line << std::endl;
  *last = std::move(line);
}

// Reads one WatchSubmission stream to its end, showing each event; the
// latest snapshot goes to `last_seen`. Returns the stream's status and
// whether any event came.
grpc::Status Follow(const Client& client, int64_t id, const WatchFlags& f, bool terminal,
                    std::string* last_line, v1::Submission* last_seen, bool* got_event) {
  v1::WatchSubmissionRequest request;
  request.set_submission_id(id);
  auto context = client.Context(0);
  auto reader = client.stub->WatchSubmission(context.get(), request);
  v1::SubmissionEvent event;
  while (reader->Read(&event)) {
    Show(event, f, terminal, last_line);
    *last_seen = event.submission();
    *got_event = true;
  }
  return reader->Finish();
}

int RunWatch(int argc, char** argv) {
  WatchFlags f;
  CommandLine flags(
      "nightshift watch SUBMISSION [--json] [--plain] [--utc]",
      std::string("Follows a submission until every job has finished: a live progress "
                  "bar on a terminal, one line per change otherwise. Exits 0 when every "
                  "job succeeded, 1 when some failed or were cancelled.\n") +
          kSubmissionHelp + kConnectionHelp);
  AddConnectionFlags(flags, &f.connection);
  flags.Bool("json", &f.json, "print each event (a Submission snapshot and its changes) as JSON");
  flags.Bool("plain", &f.plain, "plain lines even on a terminal");
  flags.Bool("utc", &f.utc, "show the ETA's clock time in UTC, not local time");
  flags.Double("reconnect-seconds", &f.reconnect_seconds,
               "keep reconnecting this long after the scheduler is lost (default 60)", "S");
  if (int rc = ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  auto text = OnePositional(flags.positional(), "SUBMISSION");
  if (!text.ok()) return Fail(kName, text.status());
  auto id = ParseSubmissionId(*text);
  if (!id.ok()) return Fail(kName, id.status());
  auto client = Dial(flags, f.connection);
  if (!client.ok()) return Fail(kName, client.status());

  // A broken stream (the scheduler restarting, a network blip) is resumed:
  // its first event is a fresh snapshot. Gives up after --reconnect-seconds
  // without an event.
  const bool terminal = !f.plain && !f.json && isatty(STDOUT_FILENO);
  const auto patience = std::chrono::duration<double>(std::max(0.0, f.reconnect_seconds));
  auto give_up_at = std::chrono::steady_clock::now() + patience;
  v1::Submission last_seen;
  std::string last_line;
  while (true) {
    bool got_event = false;
    const grpc::Status status =
        Follow(*client, *id, f, terminal, &last_line, &last_seen, &got_event);
    if (status.ok() && last_seen.done()) break;
    if (got_event) give_up_at = std::chrono::steady_clock::now() + patience;
    const bool broken = status.ok() || status.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (!broken || std::chrono::steady_clock::now() >= give_up_at) {
      if (terminal) std::cout << "\n";
      if (!status.ok()) return CallFailed(kName, "submission " + *text, status);
      return Fail(kName,
                  Unavailable("the watch stream ended before submission " + *text + " was done"));
    }
    std::cerr << (terminal ? "\n" : "") << "nightshift watch: lost the scheduler ("
              << (status.ok() ? "stream ended" : status.error_message()) << "); reconnecting\n";
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (terminal) std::cout << "\n";
  if (!f.json) std::cout << RenderOutcome(last_seen) << std::endl;
  return OutcomeExitCode(last_seen);
}

}  // namespace

NS_REGISTER_COMMAND("watch", "follow a submission's progress until it is done", RunWatch);

}  // namespace nightshift::cli
#endif  // NIGHTSHIFT_HAVE_CLI_CLIENT
