#include "common/metrics_http.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <prometheus/exposer.h>
#include <pthread.h>

#include <cstring>
#include <exception>
#include <utility>

// Debian's civetweb creates its threads with a fixed 100 KiB stack
// (USE_STACK_SIZE=102400), and glibc carves a thread's static TLS out of its
// stack: in a process that links libtorch (OpenBLAS and glog alone hold about
// 90 KiB of static TLS) pthread_create then fails with EINVAL and the Exposer
// cannot start ("null context when constructing CivetServer"). civetweb has
// no option for its stack size, so this definition interposes on libc's (an
// executable's symbols come first; common/CMakeLists.txt exports it) and adds
// kCivetwebStackExtra to the stacks civetweb asks for. Every other caller gets
// exactly what it asked for.
namespace {
constexpr size_t kCivetwebStackExtra = size_t{1} << 20;
}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn libc = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (libc == nullptr) return ENOSYS;
  Dl_info caller;
  if (dladdr(__builtin_return_address(0), &caller) != 0 && caller.dli_fname != nullptr &&
      std::strstr(caller.dli_fname, "libcivetweb") != nullptr) {
    size += kCivetwebStackExtra;
  }
  return libc(attr, size);
}

namespace nightshift::metrics {

namespace {

// civetweb reports why it cannot start through its log callback, on the
// thread that starts it; Start keeps the message for its error.
thread_local std::string* start_error = nullptr;

int LogMessage(const mg_connection*, const char* message) {
  if (start_error == nullptr) return 0;  // civetweb's own handling
  if (!start_error->empty()) *start_error += "; ";
  *start_error += message;
  return 1;
}

}  // namespace

RefreshingCollectable::RefreshingCollectable(std::shared_ptr<prometheus::Registry> registry,
                                             std::function<void()> refresh)
    : registry_(std::move(registry)), refresh_(std::move(refresh)) {}

std::vector<prometheus::MetricFamily> RefreshingCollectable::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (refresh_) refresh_();
  return registry_->Collect();
}

MetricsServer::MetricsServer(std::shared_ptr<RefreshingCollectable> collectable,
                             std::unique_ptr<prometheus::Exposer> exposer, int port)
    : collectable_(std::move(collectable)), exposer_(std::move(exposer)), port_(port) {}

MetricsServer::~MetricsServer() = default;

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options, std::shared_ptr<prometheus::Registry> registry) {
  if (registry == nullptr) return InvalidArgument("no metrics registry to serve");
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("metrics port " + std::to_string(options.port) + " is not in 0..65535");
  }
  unsigned char ip[16];
  if (inet_pton(AF_INET6, options.address.c_str(), ip) == 1) {
    return InvalidArgument("metrics address '" + options.address +
                           "': IPv6 is not supported (Debian's civetweb is built without it)");
  }
  if (inet_pton(AF_INET, options.address.c_str(), ip) != 1) {
    return InvalidArgument("metrics address '" + options.address + "' is not an IPv4 address");
  }
  const std::string bind = options.address + ":" + std::to_string(options.port);
  CivetCallbacks callbacks;
  callbacks.log_message = LogMessage;
  std::string civetweb_error;
  std::unique_ptr<prometheus::Exposer> exposer;
  start_error = &civetweb_error;
  try {
    exposer = std::make_unique<prometheus::Exposer>(bind, 2, &callbacks);
  } catch (const std::exception& e) {  // civetweb's CivetException
    start_error = nullptr;
    return Unavailable("cannot serve metrics on " + bind + ": " +
                       (civetweb_error.empty() ? e.what() : civetweb_error));
  }
  start_error = nullptr;
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) return Unavailable("cannot serve metrics on " + bind + ": no listening port");
  auto collectable =
      std::make_shared<RefreshingCollectable>(std::move(registry), options.before_scrape);
  exposer->RegisterCollectable(collectable);
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(std::move(collectable), std::move(exposer), ports.front()));
}

}  // namespace nightshift::metrics
