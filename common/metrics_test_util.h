// Test helpers for the metrics tests: a blocking HTTP/1.1 client and running
// promtool. Not for production code.
#pragma once

#include <sys/wait.h>
#include <unistd.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace nightshift::metrics::testing {

using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

// Sends one request to 127.0.0.1:`port` on a new connection and returns the
// answer. Throws boost::system::system_error on a network error.
inline HttpResponse HttpRequest(int port, boost::beast::http::verb verb,
                                const std::string& target) {
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::string_body> request(verb, target, 11);
  request.set(http::field::host, "127.0.0.1");
  request.keep_alive(false);
  http::write(socket, request);
  boost::beast::flat_buffer buffer;
  HttpResponse response;
  if (verb == http::verb::head) {
    http::response_parser<http::string_body> parser;
    parser.skip(true);  // a HEAD answer has Content-Length but no body
    http::read(socket, buffer, parser);
    return parser.release();
  }
  http::read(socket, buffer, response);
  return response;
}

inline HttpResponse HttpGet(int port, const std::string& target) {
  return HttpRequest(port, boost::beast::http::verb::get, target);
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `promtool check metrics` on `text`. exit_code is 127 when promtool is
// not installed, which a test reports as a failure (scripts/bootstrap installs it).
inline CommandResult PromtoolCheckMetrics(const std::string& text) {
  char path[] = "/tmp/ns_metrics_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {-1, "mkstemp failed"};
  close(fd);
  std::ofstream(path) << text;
  const std::string command = std::string("promtool check metrics < ") + path + " 2>&1";
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), pipe)) > 0) result.output.append(chunk, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  unlink(path);
  return result;
}

}  // namespace nightshift::metrics::testing
