// A plain HTTP/1.1 client for tests of the Batch API: one request on a fresh
// connection, the reply's status, body and body as JSON, and the multipart
// body that uploads a batch file. Header-only (Boost.Beast); tests only.
//
//   HttpReply file = HttpCall("127.0.0.1:8080", http::verb::post, "/v1/files",
//                             MultipartBatchFile(lines), kMultipartBatchFile);
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace nightshift::testutil {

struct HttpReply {
  int status = 0;  // 0: the exchange failed
  std::string body;
  nlohmann::json value;  // the body as JSON (discarded when it is not)
};

// `verb target` with `body` to `address` (HOST:PORT), sent whole or chunked.
inline HttpReply HttpCall(const std::string& address, boost::beast::http::verb verb,
                          const std::string& target, const std::string& body = "",
                          const std::string& content_type = "application/json",
                          bool chunked = false) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  HttpReply reply;
  const size_t colon = address.rfind(':');
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  boost::system::error_code ec;
  socket.connect({asio::ip::make_address(address.substr(0, colon), ec),
                  static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))},
                 ec);
  if (ec) return reply;
  http::request<http::string_body> request(verb, target, 11);
  request.set(http::field::host, address.substr(0, colon));
  request.set(http::field::content_type, content_type);
  request.body() = body;
  if (chunked) {
    request.chunked(true);
  } else {
    request.prepare_payload();
  }
  http::write(socket, request, ec);
  if (ec) return reply;
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 << 20);
  http::read(socket, buffer, parser, ec);
  if (ec) return reply;
  reply.status = parser.get().result_int();
  reply.body = parser.get().body();
  reply.value = nlohmann::json::parse(reply.body, nullptr, false);
  return reply;
}

// The content type of MultipartBatchFile's body.
inline constexpr const char* kMultipartBatchFile = "multipart/form-data; boundary=b0undary";

// A POST /v1/files body: `file` as an upload of purpose "batch".
inline std::string MultipartBatchFile(const std::string& file) {
  return "--b0undary\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
         "--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
         "\r\n" +
         file + "\r\n--b0undary--\r\n";
}

}  // namespace nightshift::testutil
