// A TCP proxy on loopback for fault tests: a link between two processes that
// can go silent. It forwards every connection to a target port until
// Silence(); from then on the connections open at that moment drop every
// byte both ways and are never closed (no FIN, no RST: to both ends the
// peer just stops answering, as when a cable is pulled or a switch drops the
// packets), and new connections are accepted but left unread. Restore()
// forwards new connections again, the ones that waited included (their
// bytes, held by the kernel, go through as a retransmission would); the
// silenced ones stay dead until an end closes its side. Header-only; tests
// only.
//
//   auto proxy = TcpProxy::Start(scheduler_port);
//   worker --scheduler proxy->address() ...
//   proxy->Silence(); ... proxy->Restore();
//
// Thread-safety: every method may be called from any thread. Each
// connection has two pump threads; all are joined by the destructor, which
// shuts every socket down.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nightshift::testutil {

class TcpProxy {
 public:
  // Listens on 127.0.0.1 (a free port) and forwards to 127.0.0.1:`target_port`.
  // nullptr when it cannot listen.
  static std::unique_ptr<TcpProxy> Start(int target_port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close(fd);
      return nullptr;
    }
    return std::unique_ptr<TcpProxy>(new TcpProxy(fd, ntohs(addr.sin_port), target_port));
  }

  ~TcpProxy() {
    stopping_ = true;
    accept_thread_.join();
    std::vector<std::thread> pumps;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& link : links_) {
        shutdown(link->client, SHUT_RDWR);
        shutdown(link->upstream, SHUT_RDWR);
      }
      pumps.swap(pumps_);
    }
    for (std::thread& t : pumps) t.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& link : links_) {
      close(link->client);
      close(link->upstream);
    }
    for (int fd : waiting_) close(fd);
    close(listen_fd_);
  }

  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // The connections open now go silent for good; new ones wait.
  void Silence() {
    std::lock_guard<std::mutex> lock(mu_);
    silent_ = true;
    for (auto& link : links_) link->dead = true;
  }

  // New connections, and those that waited, are forwarded again.
  void Restore() {
    std::lock_guard<std::mutex> lock(mu_);
    silent_ = false;
    for (int fd : waiting_) ForwardLocked(fd);
    waiting_.clear();
  }

  // Connections accepted so far; bytes dropped by silenced ones.
  int connections() const { return accepted_; }
  int64_t dropped_bytes() const { return dropped_; }

 private:
  struct Link {
    int client = -1;
    int upstream = -1;
    std::atomic<bool> dead{false};
  };

  TcpProxy(int listen_fd, int port, int target_port)
      : listen_fd_(listen_fd), port_(port), target_port_(target_port) {
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  void AcceptLoop() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted_;
      std::lock_guard<std::mutex> lock(mu_);
      if (silent_) {
        waiting_.push_back(fd);  // left unread: its bytes wait in the kernel
      } else {
        ForwardLocked(fd);
      }
    }
  }

  void ForwardLocked(int client) {
    const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (upstream < 0 || connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      if (upstream >= 0) close(upstream);
      close(client);
      return;
    }
    auto link = std::make_shared<Link>();
    link->client = client;
    link->upstream = upstream;
    links_.push_back(link);
    pumps_.emplace_back([this, link] { Pump(*link, link->client, link->upstream); });
    pumps_.emplace_back([this, link] { Pump(*link, link->upstream, link->client); });
  }

  // Copies `from` to `to` until `from` ends; a dead link reads and drops.
  // An end closing a live link closes the other end's writing side; a dead
  // link passes nothing on, its close included.
  void Pump(Link& link, int from, int to) {
    char buffer[64 * 1024];
    while (true) {
      const ssize_t n = read(from, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (link.dead) {
        dropped_ += n;
        continue;
      }
      ssize_t done = 0;
      while (done < n) {
        const ssize_t w = send(to, buffer + done, static_cast<size_t>(n - done), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        done += w;
      }
    }
    if (!link.dead && !stopping_) shutdown(to, SHUT_WR);
  }

  const int listen_fd_;
  const int port_;
  const int target_port_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int64_t> dropped_{0};
  std::thread accept_thread_;

  std::mutex mu_;
  bool silent_ = false;
  std::vector<std::shared_ptr<Link>> links_;
  std::vector<int> waiting_;
  std::vector<std::thread> pumps_;
};

}  // namespace nightshift::testutil
