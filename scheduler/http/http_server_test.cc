// The Beast transport on loopback with a real client (Beast's), plain and
// TLS: requests reach the handler whole, bodies stream both ways, keep-alive
// works, an early answer to a large upload reaches the client, idle,
// stalled and dripping clients are closed and their threads freed.
#include "scheduler/http/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tests/testing/paths.h"

namespace nightshift::scheduler::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

// Echoes what it got: "METHOD PATH q=... auth=... body=N bytes".
HttpResponse Echo(const HttpRequest& request) {
  HttpResponse response;
  if (request.path == "/early") {  // answers without reading the body
    response.status = 413;
    response.body = "too big";
    response.close = true;
    return response;
  }
  if (request.path == "/stream") {
    const bool sized = request.query.count("sized") != 0;
    response.stream = [](BodyWriter& out) -> Status {
      for (int i = 0; i < 1000; ++i) NS_RETURN_IF_ERROR(out.Write(std::to_string(i) + "\n"));
      return Status::Ok();
    };
    if (sized) {
      int64_t size = 0;
      for (int i = 0; i < 1000; ++i) size += static_cast<int64_t>(std::to_string(i).size()) + 1;
      response.stream_length = size;
    }
    return response;
  }
  if (request.path == "/big") {  // 256 MB: more than the sockets' buffers hold
    response.stream = [](BodyWriter& out) -> Status {
      const std::string chunk(1 << 20, 'x');
      for (int i = 0; i < 256; ++i) NS_RETURN_IF_ERROR(out.Write(chunk));
      return Status::Ok();
    };
    return response;
  }
  auto body = ReadAll(*request.body, 64 << 20);
  std::string query;
  for (const auto& [k, v] : request.query) query += k + "=" + v + ";";
  response.body = request.method + " " + request.path + " q=" + query +
                  " auth=" + request.Header("authorization") +
                  " body=" + std::to_string(body.ok() ? body->size() : 0);
  return response;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Serve(HttpServerOptions options = {}) {
    options.on_timeout = [this](const std::string& peer, const std::string& why) {
      std::lock_guard<std::mutex> lock(mu_);
      timeouts_.push_back(peer + ": " + why);
    };
    auto server = HttpServer::Start(options, Echo);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  tcp::endpoint Endpoint() const {
    return {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server_->port())};
  }
  std::vector<std::string> Timeouts() {
    std::lock_guard<std::mutex> lock(mu_);
    return timeouts_;
  }
  // Whether every connection's thread has ended within `seconds`.
  bool ThreadsFreedWithin(double seconds) const { return ConnectionsWithin(0, seconds); }
  // Whether the server holds `count` connections within `seconds`.
  bool ConnectionsWithin(int count, double seconds) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (server_->connections() != count) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  asio::io_context io_;
  // Before server_, so they outlive it: its reaper thread may report a
  // timeout (on_timeout) until the server is destroyed.
  std::mutex mu_;
  std::vector<std::string> timeouts_;
  std::unique_ptr<HttpServer> server_;
};

bhttp::request<bhttp::string_body> Request(bhttp::verb verb, const std::string& target,
                                           std::string body = "") {
  bhttp::request<bhttp::string_body> request(verb, target, 11);
  request.set(bhttp::field::host, "127.0.0.1");
  request.set(bhttp::field::authorization, "Bearer t");
  request.body() = std::move(body);
  request.prepare_payload();
  return request;
}

TEST_F(HttpServerTest, RequestsReachTheHandlerWholeOnOneKeptAliveConnection) {
  Serve();
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  boost::beast::flat_buffer buffer;
  for (int i = 0; i < 3; ++i) {
    bhttp::write(socket, Request(bhttp::verb::post, "/v1/x%20y?limit=2&after=file-3&q=a+b",
                                 std::string(300'000 + i, 'z')));
    bhttp::response<bhttp::string_body> response;
    bhttp::read(socket, buffer, response);
    EXPECT_EQ(response.result_int(), 200);
    EXPECT_TRUE(response.keep_alive());
    EXPECT_EQ(response.body(), "POST /v1/x y q=after=file-3;limit=2;q=a b; auth=Bearer t body=" +
                                   std::to_string(300'000 + i));
  }
}

TEST_F(HttpServerTest, AChunkedRequestBodyIsReadToItsEnd) {
  Serve();
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  const std::string head =
      "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  asio::write(socket, asio::buffer(head));
  boost::beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> response;
  bhttp::read(socket, buffer, response);
  EXPECT_EQ(response.body(), "POST /up q= auth= body=11");
}

TEST_F(HttpServerTest, StreamedBodiesGoOutChunkedOrWithTheirLength) {
  Serve();
  std::string expected;
  for (int i = 0; i < 1000; ++i) expected += std::to_string(i) + "\n";
  for (const char* target : {"/stream", "/stream?sized=1"}) {
    tcp::socket socket(io_);
    socket.connect(Endpoint());
    bhttp::write(socket, Request(bhttp::verb::get, target));
    boost::beast::flat_buffer buffer;
    bhttp::response<bhttp::string_body> response;
    bhttp::read(socket, buffer, response);
    EXPECT_EQ(response.body(), expected) << target;
    EXPECT_EQ(response.chunked(), std::string(target) == "/stream") << target;
  }
}

TEST_F(HttpServerTest, AnEarlyAnswerToALargeUploadReachesTheClient) {
  Serve();
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  // The client writes all of its 8 MB before it reads: the server drops the
  // body after answering, so the write completes and the answer is there.
  bhttp::write(socket, Request(bhttp::verb::post, "/early", std::string(8 << 20, 'x')));
  boost::beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> response;
  bhttp::read(socket, buffer, response);
  EXPECT_EQ(response.result_int(), 413);
  EXPECT_EQ(response.body(), "too big");
  EXPECT_FALSE(response.keep_alive());
}

TEST_F(HttpServerTest, AnIdleConnectionIsClosed) {
  HttpServerOptions options;
  options.idle_timeout_ms = 300;
  Serve(options);
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  char byte;
  boost::system::error_code ec;
  const auto start = std::chrono::steady_clock::now();
  socket.read_some(asio::buffer(&byte, 1), ec);  // blocks until the server closes it
  EXPECT_TRUE(ec == asio::error::eof || ec == asio::error::connection_reset) << ec.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(HttpServerTest, AnUploadThatStopsMidBodyIsClosedAndItsThreadFreed) {
  HttpServerOptions options;
  options.idle_timeout_ms = 300;
  Serve(options);
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  const std::string head =
      "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n";
  asio::write(socket, asio::buffer(head + std::string(1000, 'x')));  // then nothing more
  ASSERT_TRUE(ConnectionsWithin(1, 2));
  const auto start = std::chrono::steady_clock::now();
  char byte;
  boost::system::error_code ec;
  while (!ec) socket.read_some(asio::buffer(&byte, 1), ec);  // until the server closes it
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(ThreadsFreedWithin(5));
  ASSERT_EQ(Timeouts().size(), 1u);
  EXPECT_NE(Timeouts()[0].find("127.0.0.1:"), std::string::npos) << Timeouts()[0];
  EXPECT_NE(Timeouts()[0].find("no byte went either way for 0.3 s"), std::string::npos)
      << Timeouts()[0];
}

TEST_F(HttpServerTest, AClientThatNeverReadsItsAnswerIsClosedAndItsThreadFreed) {
  HttpServerOptions options;
  options.idle_timeout_ms = 300;
  Serve(options);
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  bhttp::write(socket, Request(bhttp::verb::get, "/big"));  // 256 MB answer, never read
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(ThreadsFreedWithin(5)) << "the writer stays blocked on a full socket";
  ASSERT_EQ(Timeouts().size(), 1u);
  EXPECT_NE(Timeouts()[0].find("not reading its answer"), std::string::npos) << Timeouts()[0];
}

TEST_F(HttpServerTest, AHeaderDrippedAByteAtATimeIsCutOffAtTheHeaderTimeout) {
  HttpServerOptions options;
  options.idle_timeout_ms = 300;     // each byte comes well within it ...
  options.header_timeout_ms = 1000;  // ... but the header never ends
  Serve(options);
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  const std::string drip = "GET / HTTP/1.1\r\nX-Slow: " + std::string(200, 'a');
  const auto start = std::chrono::steady_clock::now();
  boost::system::error_code ec;
  for (size_t i = 0; i < drip.size() && !ec; ++i) {
    asio::write(socket, asio::buffer(&drip[i], 1), ec);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (server_->connections() == 0) break;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(ThreadsFreedWithin(1));
  EXPECT_GT(seconds, 0.9);
  EXPECT_LT(seconds, 5.0) << "the 200-byte drip (10 s) was not cut off";
  ASSERT_EQ(Timeouts().size(), 1u);
  EXPECT_NE(Timeouts()[0].find("its request header took over 1 s"), std::string::npos)
      << Timeouts()[0];
}

TEST_F(HttpServerTest, AKeptAliveConnectionIdleBetweenRequestsIsClosedQuietly) {
  HttpServerOptions options;
  options.idle_timeout_ms = 300;
  Serve(options);
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  bhttp::write(socket, Request(bhttp::verb::get, "/a"));
  boost::beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> response;
  bhttp::read(socket, buffer, response);
  EXPECT_TRUE(response.keep_alive());
  EXPECT_TRUE(ThreadsFreedWithin(5));
  EXPECT_TRUE(Timeouts().empty()) << "routine, not a fault: " << Timeouts()[0];
}

TEST_F(HttpServerTest, StopEndsOpenConnections) {
  Serve();
  tcp::socket socket(io_);
  socket.connect(Endpoint());
  server_->Stop();
  char byte;
  boost::system::error_code ec;
  socket.read_some(asio::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec);
}

TEST_F(HttpServerTest, TlsWithTheSchedulersCertificate) {
  const std::string tls = testutil::DataPath("scheduler/tls/");
  HttpServerOptions options;
  options.tls_cert = tls + "cert.pem";
  options.tls_key = tls + "key.pem";
  Serve(options);
  asio::ssl::context context(asio::ssl::context::tls_client);
  context.load_verify_file(tls + "cert.pem");
  context.set_verify_mode(asio::ssl::verify_peer);
  asio::ssl::stream<tcp::socket> stream(io_, context);
  stream.set_verify_callback(asio::ssl::host_name_verification("localhost"));
  stream.next_layer().connect(Endpoint());
  stream.handshake(asio::ssl::stream_base::client);
  bhttp::write(stream, Request(bhttp::verb::get, "/v1/models"));
  boost::beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> response;
  bhttp::read(stream, buffer, response);
  EXPECT_EQ(response.body(), "GET /v1/models q= auth=Bearer t body=0");

  // Plain HTTP to a TLS port gets no answer.
  tcp::socket plain(io_);
  plain.connect(Endpoint());
  bhttp::write(plain, Request(bhttp::verb::get, "/v1/models"));
  bhttp::response<bhttp::string_body> none;
  boost::system::error_code ec;
  bhttp::read(plain, buffer, none, ec);
  EXPECT_TRUE(ec);

  HttpServerOptions bad = options;
  bad.tls_key = tls + "missing.pem";
  EXPECT_EQ(HttpServer::Start(bad, Echo).status().code(), StatusCode::kInvalidArgument);
}

TEST(SplitTargetTest, PathAndDecodedQuery) {
  std::string path;
  std::map<std::string, std::string> query;
  SplitTarget("/v1/files?purpose=batch&order=asc&bad=%zz&flag", &path, &query);
  EXPECT_EQ(path, "/v1/files");
  EXPECT_EQ(query, (std::map<std::string, std::string>{
                       {"purpose", "batch"}, {"order", "asc"}, {"bad", "%zz"}, {"flag", ""}}));
}

}  // namespace
}  // namespace nightshift::scheduler::http
