#include "common/metrics_http.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>

namespace nightshift::metrics {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::chrono::seconds kIdleTimeout(30);

// The answer to one request.
http::response<http::string_body> Respond(const http::request<http::string_body>& request,
                                          const Registry& registry,
                                          const std::function<void()>& before_scrape) {
  http::response<http::string_body> response;
  response.version(request.version());
  response.keep_alive(request.keep_alive());
  response.set(http::field::server, "nightshift");
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get_or_head =
      request.method() == http::verb::get || request.method() == http::verb::head;
  if (path != "/metrics") {
    response.result(http::status::not_found);
    response.set(http::field::content_type, "text/plain; charset=utf-8");
    response.body() = "404 not found: metrics are served on /metrics\n";
  } else if (!get_or_head) {
    response.result(http::status::method_not_allowed);
    response.set(http::field::allow, "GET, HEAD");
    response.set(http::field::content_type, "text/plain; charset=utf-8");
    response.body() = "405 method not allowed: use GET\n";
  } else {
    if (before_scrape) before_scrape();
    response.result(http::status::ok);
    response.set(http::field::content_type, TextSerializer::kContentType);
    response.body() = TextSerializer().Serialize(registry.Collect());
  }
  response.prepare_payload();
  if (request.method() == http::verb::head) response.body().clear();
  return response;
}

// One client connection: read a request, answer it, repeat while kept alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<const Registry> registry,
          const std::function<void()>* before_scrape)
      : stream_(std::move(socket)), registry_(std::move(registry)), before_scrape_(before_scrape) {}

  void Read() {
    request_ = {};
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (!ec) self->Answer();
                     });
  }

 private:
  void Answer() {
    // HEAD answers carry the GET's Content-Length without a body.
    const bool head = request_.method() == http::verb::head;
    response_ = Respond(request_, *registry_, *before_scrape_);
    auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return;
      if (!self->response_.keep_alive()) {
        beast::error_code ignored;
        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        return;
      }
      self->Read();
    };
    if (head) {
      serializer_.emplace(response_);
      http::async_write_header(stream_, *serializer_, std::move(done));
    } else {
      http::async_write(stream_, response_, std::move(done));
    }
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  std::optional<http::response_serializer<http::string_body>> serializer_;
  std::shared_ptr<const Registry> registry_;
  const std::function<void()>* before_scrape_;  // owned by the server, which outlives sessions
};

}  // namespace

struct MetricsServer::Impl {
  Impl(std::shared_ptr<const Registry> r, std::function<void()> hook)
      : registry(std::move(r)), before_scrape(std::move(hook)) {}

  void Accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<Session>(std::move(socket), registry, &before_scrape)->Read();
      Accept();
    });
  }

  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::shared_ptr<const Registry> registry;
  std::function<void()> before_scrape;
  std::thread thread;
  int port = 0;
};

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options, std::shared_ptr<const Registry> registry) {
  if (registry == nullptr) return InvalidArgument("metrics server: no registry");
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("metrics server: port " + std::to_string(options.port) +
                           " is outside 0..65535");
  }
  const std::string host = options.address == "localhost" ? "127.0.0.1" : options.address;
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) {
    return InvalidArgument("metrics server: '" + options.address + "' is not an IP address");
  }
  auto impl = std::make_unique<Impl>(std::move(registry), options.before_scrape);
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  const std::string where = options.address + ":" + std::to_string(options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("metrics server: cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() {
  // Stopping the loop abandons pending handlers; destroying the io_context
  // (after the acceptor, with impl_) destroys them and so closes every session.
  impl_->io.stop();
  impl_->thread.join();
}

int MetricsServer::port() const { return impl_->port; }

}  // namespace nightshift::metrics
