#include "scheduler/http/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <list>
#include <mutex>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace nightshift::scheduler::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int FromHex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Decode(std::string_view text, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int hi = FromHex(text[i + 1]);
      const int lo = FromHex(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += plus_is_space && text[i] == '+' ? ' ' : text[i];
  }
  return out;
}

// A stream that notes the time of its last read or write, so idle
// connections can be found. Meets Beast's SyncReadStream and SyncWriteStream.
template <class Next>
class Tracked {
 public:
  Tracked(Next& next, std::atomic<int64_t>* last_io) : next_(next), last_io_(last_io) {}
  template <class Buffers>
  size_t read_some(const Buffers& buffers, error_code& ec) {
    const size_t n = next_.read_some(buffers, ec);
    *last_io_ = NowMs();
    return n;
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers, error_code& ec) {
    const size_t n = next_.write_some(buffers, ec);
    *last_io_ = NowMs();
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  Next& next_;
  std::atomic<int64_t>* last_io_;
};

// One accepted connection. Its socket is closed, and `fd` set to -1, under
// the server's mutex, so the reaper never shuts down a reused descriptor.
struct Connection {
  // What a connection's deadline bounds.
  enum Wait : int { kHandshake, kHeader, kDiscard };

  explicit Connection(tcp::socket s) : socket(std::move(s)), fd(socket.native_handle()) {
    error_code ec;
    const tcp::endpoint remote = socket.remote_endpoint(ec);
    if (!ec) peer = remote.address().to_string() + ":" + std::to_string(remote.port());
  }
  // Closes the connection once NowMs() passes `deadline` unless cleared first.
  void Bound(Wait what, int64_t deadline) {
    wait = what;
    bound_at_ms = NowMs();
    deadline_ms = deadline;
  }
  void Unbound() { deadline_ms = 0; }

  tcp::socket socket;
  int fd;
  std::string peer = "?";
  std::atomic<int64_t> last_io_ms{NowMs()};
  std::atomic<int64_t> deadline_ms{0};  // 0 = none
  std::atomic<int> wait{kHeader};       // what deadline_ms bounds
  std::atomic<int64_t> bound_at_ms{0};  // when deadline_ms was set
  std::atomic<int> answered{0};         // requests answered on this connection
  bool timed_out = false;               // shut down by the reaper (under the server's mutex)
  std::atomic<bool> done{false};
  std::thread thread;
};

// The request body, read from the parser as the handler asks.
template <class Stream>
class ParserBody : public BodyReader {
 public:
  ParserBody(Stream& stream, beast::flat_buffer& buffer,
             bhttp::request_parser<bhttp::buffer_body>& parser, bool expect_continue)
      : stream_(stream), buffer_(buffer), parser_(parser), expect_continue_(expect_continue) {}

  StatusOr<size_t> Read(char* data, size_t size) override {
    if (size == 0) return size_t{0};
    if (expect_continue_) {
      // The client waits for leave to send the body: given once it is read.
      expect_continue_ = false;
      bhttp::response<bhttp::empty_body> go{bhttp::status::continue_, 11};
      error_code ec;
      bhttp::write(stream_, go, ec);
      if (ec) return Unavailable("writing 100 Continue: " + ec.message());
    }
    while (!parser_.is_done()) {
      parser_.get().body().data = data;
      parser_.get().body().size = size;
      error_code ec;
      bhttp::read(stream_, buffer_, parser_, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) return Unavailable("reading the request body: " + ec.message());
      const size_t n = size - parser_.get().body().size;
      if (n > 0) return n;
    }
    return size_t{0};
  }

  // Whether the body was read to its end.
  bool finished() const { return parser_.is_done(); }
  bool continue_pending() const { return expect_continue_; }

 private:
  Stream& stream_;
  beast::flat_buffer& buffer_;
  bhttp::request_parser<bhttp::buffer_body>& parser_;
  bool expect_continue_;
};

template <class Stream>
class SerializerBody : public BodyWriter {
 public:
  SerializerBody(Stream& stream, bhttp::response<bhttp::buffer_body>& response,
                 bhttp::response_serializer<bhttp::buffer_body>& serializer)
      : stream_(stream), response_(response), serializer_(serializer) {}
  Status Write(std::string_view data) override {
    if (data.empty()) return Status::Ok();
    response_.body().data = const_cast<char*>(data.data());
    response_.body().size = data.size();
    response_.body().more = true;
    error_code ec;
    bhttp::write(stream_, serializer_, ec);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) return Unavailable("writing the response: " + ec.message());
    return Status::Ok();
  }
  Status Finish() {
    response_.body().data = nullptr;
    response_.body().size = 0;
    response_.body().more = false;
    error_code ec;
    bhttp::write(stream_, serializer_, ec);
    if (ec) return Unavailable("ending the response: " + ec.message());
    return Status::Ok();
  }

 private:
  Stream& stream_;
  bhttp::response<bhttp::buffer_body>& response_;
  bhttp::response_serializer<bhttp::buffer_body>& serializer_;
};

template <class Message>
void SetHeaders(Message& message, const HttpResponse& response, bool keep_alive) {
  message.result(static_cast<unsigned>(response.status));
  message.set(bhttp::field::server, "nightshift");
  message.set(bhttp::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) message.set(name, value);
  message.keep_alive(keep_alive);
}

std::string ServiceUnavailable() {
  const std::string body =
      R"({"error": {"message": "too many connections; try again", "type": "server_error", )"
      R"("param": null, "code": null}})";
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

void SplitTarget(const std::string& target, std::string* path,
                 std::map<std::string, std::string>* query) {
  const size_t mark = target.find('?');
  *path = Decode(std::string_view(target).substr(0, mark), false);
  query->clear();
  if (mark == std::string::npos) return;
  std::string_view rest = std::string_view(target).substr(mark + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const size_t eq = pair.find('=');
    if (!pair.empty()) {
      (*query)[Decode(pair.substr(0, eq), true)] =
          eq == std::string_view::npos ? "" : Decode(pair.substr(eq + 1), true);
    }
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
}

class HttpServer::Impl {
 public:
  Impl(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        acceptor_(io_),
        tls_(asio::ssl::context::tls_server) {}

  ~Impl() { Stop(); }

  Status Start() {
    if (options_.tls_cert.empty() != options_.tls_key.empty()) {
      return InvalidArgument("TLS needs both a certificate and a key");
    }
    use_tls_ = !options_.tls_cert.empty();
    if (use_tls_) {
      error_code ec;
      tls_.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                           asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1,
                       ec);
      tls_.use_certificate_chain_file(options_.tls_cert, ec);
      if (ec) return InvalidArgument("TLS certificate " + options_.tls_cert + ": " + ec.message());
      tls_.use_private_key_file(options_.tls_key, asio::ssl::context::pem, ec);
      if (ec) return InvalidArgument("TLS key " + options_.tls_key + ": " + ec.message());
    }
    error_code ec;
    const auto address = asio::ip::make_address(options_.host, ec);
    if (ec) return InvalidArgument("HTTP host '" + options_.host + "' is not an IP address");
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Unavailable("cannot listen for HTTP on " + options_.host + ":" +
                         std::to_string(options_.port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    reaper_thread_ = std::thread([this] { ReapLoop(); });
    return Status::Ok();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      // Wakes the blocked accept(); the acceptor is closed by its own thread.
      if (acceptor_.is_open()) ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
      for (auto& c : connections_) {
        if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
      }
    }
    cv_.notify_all();
    if (accept_thread_.joinable()) accept_thread_.join();
    if (reaper_thread_.joinable()) reaper_thread_.join();
    std::list<std::unique_ptr<Connection>> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(connections_);
    }
    for (auto& c : left) {
      if (c->thread.joinable()) c->thread.join();
    }
  }

  int port() const { return port_; }
  int connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(connections_.size());
  }

 private:
  void AcceptLoop() {
    while (true) {
      tcp::socket socket(io_);
      error_code ec;
      acceptor_.accept(socket, ec);
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) break;
      if (ec) {
        // A transient failure (no descriptors left, ...): let it pass.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (static_cast<int>(connections_.size()) >= options_.max_connections) {
        const std::string refusal = ServiceUnavailable();
        asio::write(socket, asio::buffer(refusal), ec);
        socket.close(ec);
        continue;
      }
      connections_.push_back(std::make_unique<Connection>(std::move(socket)));
      Connection* c = connections_.back().get();
      c->thread = std::thread([this, c] { Serve(*c); });
    }
    error_code ignored;
    acceptor_.close(ignored);
  }

  // Shuts down connections idle too long or past their deadline, and joins
  // the threads of finished ones.
  void ReapLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      const int64_t now = NowMs();
      for (auto it = connections_.begin(); it != connections_.end();) {
        Connection& c = **it;
        if (c.done) {
          if (c.thread.joinable()) c.thread.join();
          it = connections_.erase(it);
          continue;
        }
        if (c.fd >= 0 && !c.timed_out) {
          const Verdict verdict = TimedOut(c, now);
          if (verdict.close) {
            ::shutdown(c.fd, SHUT_RDWR);
            c.timed_out = true;
            if (!verdict.why.empty() && options_.on_timeout)
              options_.on_timeout(c.peer, verdict.why);
          }
        }
        ++it;
      }
    }
  }

  // Whether `c` must be closed at `now`, and why (empty for a kept-alive
  // connection that idled between requests: closing it is routine).
  struct Verdict {
    bool close = false;
    std::string why;
  };
  Verdict TimedOut(const Connection& c, int64_t now) const {
    const int64_t last_io = c.last_io_ms;
    const bool between_requests =
        c.answered > 0 && c.wait == Connection::kHeader && last_io <= c.bound_at_ms;
    if (now - last_io > options_.idle_timeout_ms) {
      if (between_requests) return {true, ""};
      return {true, "no byte went either way for " + Seconds(options_.idle_timeout_ms) +
                        " (a stalled upload, or a client not reading its answer)"};
    }
    const int64_t deadline = c.deadline_ms;
    if (deadline == 0 || now <= deadline) return {};
    switch (c.wait) {
      case Connection::kHandshake:
        return {true, "its TLS handshake took over 10 s"};
      case Connection::kHeader:
        if (between_requests) return {true, ""};
        return {true, "its request header took over " + Seconds(options_.header_timeout_ms)};
      default:
        return {true, "it sent the rest of a refused body for over 30 s"};
    }
  }
  static std::string Seconds(int64_t ms) {
    std::string text = std::to_string(ms / 1000.0);
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text + " s";
  }

  void Serve(Connection& c) {
    if (use_tls_) {
      asio::ssl::stream<tcp::socket&> tls(c.socket, tls_);
      error_code ec;
      c.Bound(Connection::kHandshake, NowMs() + 10'000);
      tls.handshake(asio::ssl::stream_base::server, ec);
      c.Unbound();
      if (!ec) {
        Tracked<asio::ssl::stream<tcp::socket&>> stream(tls, &c.last_io_ms);
        // No TLS close_notify exchange: waiting for the client's could hold
        // this thread until the idle timeout; the TCP close ends it.
        ServeStream(stream, c);
      }
    } else {
      Tracked<tcp::socket> stream(c.socket, &c.last_io_ms);
      ServeStream(stream, c);
    }
    std::lock_guard<std::mutex> lock(mu_);
    error_code ignored;
    c.socket.shutdown(tcp::socket::shutdown_both, ignored);
    c.socket.close(ignored);
    c.fd = -1;
    c.done = true;
  }

  template <class Stream>
  void ServeStream(Stream& stream, Connection& c) {
    beast::flat_buffer buffer;
    while (true) {
      bhttp::request_parser<bhttp::buffer_body> parser;
      parser.header_limit(32 << 10);
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      error_code ec;
      c.Bound(Connection::kHeader, NowMs() + options_.header_timeout_ms);
      bhttp::read_header(stream, buffer, parser, ec);
      c.Unbound();
      if (ec) return;  // the client closed, or sent something that is not HTTP
      const auto& header = parser.get();
      HttpRequest request;
      request.method = std::string(header.method_string());
      SplitTarget(std::string(header.target()), &request.path, &request.query);
      for (const auto& field : header) {
        std::string name(field.name_string());
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        request.headers[name] = std::string(field.value());
      }
      if (auto length = parser.content_length()) {
        request.content_length = static_cast<int64_t>(*length);
      }
      const bool expect_continue = beast::iequals(header[bhttp::field::expect], "100-continue");
      ParserBody<Stream> body(stream, buffer, parser, expect_continue && !parser.is_done());
      request.body = &body;
      const bool client_keeps = header.keep_alive();
      HttpResponse response = handler_(request);
      // A body left unread is dropped after the answer (the client gets to
      // read it); a client still waiting for 100 Continue sends none.
      const bool unread = !body.finished() && !body.continue_pending();
      bool keep = client_keeps && !response.close && !unread && body.finished();
      if (!Write(stream, response, keep)) return;
      ++c.answered;
      if (unread) Discard(body, c);
      if (!keep) return;
    }
  }

  template <class Stream>
  bool Write(Stream& stream, const HttpResponse& response, bool keep_alive) {
    error_code ec;
    if (!response.stream) {
      bhttp::response<bhttp::string_body> message;
      message.version(11);
      SetHeaders(message, response, keep_alive);
      message.body() = response.body;
      message.prepare_payload();
      bhttp::write(stream, message, ec);
      return !ec;
    }
    bhttp::response<bhttp::buffer_body> message;
    message.version(11);
    SetHeaders(message, response, keep_alive);
    if (response.stream_length) {
      message.content_length(static_cast<uint64_t>(*response.stream_length));
    } else {
      message.chunked(true);
    }
    message.body().data = nullptr;
    message.body().more = true;
    bhttp::response_serializer<bhttp::buffer_body> serializer{message};
    bhttp::write_header(stream, serializer, ec);
    if (ec) return false;
    SerializerBody<Stream> out(stream, message, serializer);
    if (!response.stream(out).ok()) return false;  // framing is broken: close
    return out.Finish().ok();
  }

  template <class Stream>
  void Discard(ParserBody<Stream>& body, Connection& c) {
    c.Bound(Connection::kDiscard, NowMs() + 30'000);
    std::vector<char> scratch(64 << 10);
    int64_t dropped = 0;
    while (dropped < options_.max_discard_bytes) {
      auto n = body.Read(scratch.data(), scratch.size());
      if (!n.ok() || *n == 0) break;
      dropped += static_cast<int64_t>(*n);
    }
    c.Unbound();
  }

  HttpServerOptions options_;
  HttpHandler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::ssl::context tls_;
  bool use_tls_ = false;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::list<std::unique_ptr<Connection>> connections_;
  std::thread accept_thread_;
  std::thread reaper_thread_;
};

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                        HttpHandler handler) {
  auto impl = std::make_unique<Impl>(options, std::move(handler));
  NS_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Stop(); }
int HttpServer::port() const { return impl_->port(); }
int HttpServer::connections() const { return impl_->connections(); }
void HttpServer::Stop() { impl_->Stop(); }

}  // namespace nightshift::scheduler::http
