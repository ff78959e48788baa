// An HTTP/1.1 server over Boost.Beast, plain or TLS, that carries requests
// to a handler (http.h): request bodies are read in pieces as the handler
// asks, response bodies written in pieces (Content-Length when known, else
// chunked), keep-alive between requests.
//
// One thread per connection (blocking reads and writes: the handlers do
// blocking SQLite and file I/O anyway), at most max_connections at once
// (503 beyond). A connection with no I/O for idle_timeout_ms is closed, so
// an idle or stalled client (an upload that stops mid-body, a client that
// never reads its answer) cannot hold its thread; nor can one that drips its
// request header a byte at a time: the header must arrive whole within
// header_timeout_ms. Each such close is reported to on_timeout. A body the handler left
// unread (an early 413) is read and dropped after the answer, up to
// max_discard_bytes, so the client gets to read the answer; then the
// connection closes.
//
// Thread-safety: Start, port and Stop from one owner thread; the handler is
// called from many connection threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "scheduler/http/http.h"

namespace nightshift::scheduler::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an address to bind: 127.0.0.1, 0.0.0.0, ::1, ...
  int port = 0;                    // 0 picks a free one
  std::string tls_cert;            // PEM files; both or neither (then plain HTTP)
  std::string tls_key;
  int max_connections = 64;
  int64_t idle_timeout_ms = 60'000;
  // From when the server starts waiting for a request (so it also bounds an
  // idle kept-alive connection) until its header has arrived.
  int64_t header_timeout_ms = 60'000;
  int64_t max_discard_bytes = 1LL << 30;
  // Called from the server's own thread, once per connection it closes for a
  // timeout: `peer` is "HOST:PORT", `why` says which timeout and how long.
  std::function<void(const std::string& peer, const std::string& why)> on_timeout;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  // Binds and starts serving. Errors: InvalidArgument for unreadable TLS
  // files or a bad host, Unavailable when the port cannot be bound.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                     HttpHandler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the real one when 0 was asked for).
  int port() const;
  // Connections open now, each holding a thread (for tests: a closed one is
  // counted until its thread has been joined, within a fraction of a second).
  int connections() const;
  // Stops accepting, closes every connection and joins every thread.
  // Requests being handled see their connection fail. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "/v1/files?limit=2&after=file-3" split into the path and the decoded
// query (percent escapes, '+' as a space in the query). A malformed escape
// is kept as it is.
void SplitTarget(const std::string& target, std::string* path,
                 std::map<std::string, std::string>* query);

}  // namespace nightshift::scheduler::http
