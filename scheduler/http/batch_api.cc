#include "scheduler/http/batch_api.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "proto/batch_format.h"
#include "scheduler/disk_full.h"
#include "scheduler/http/multipart.h"

namespace nightshift::scheduler::http {
namespace {

using json = nlohmann::ordered_json;

constexpr int64_t kDayMs = 24 * 3600'000LL;
constexpr size_t kMaxJsonBody = 1 << 20;
constexpr size_t kIoChunk = 64 << 10;
// Multipart framing and the small fields around the file's bytes.
constexpr int64_t kMultipartSlack = 64 << 10;

void Log(const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cerr << "nightshift-scheduler: http: " << line << std::endl;
}

// ---------------------------------------------------------------- responses

json NullIfEmpty(const std::string& text) { return text.empty() ? json(nullptr) : json(text); }

// OpenAI's error shape. 4xx answers carry x-should-retry: false, so the
// official SDKs (which retry 409 by default) report them at once.
HttpResponse Error(int status, const std::string& message, const std::string& param = "",
                   const std::string& code = "") {
  std::string type = "invalid_request_error";
  if (status == 401) type = "authentication_error";
  if (status == 403) type = "permission_error";
  if (status >= 500) type = "server_error";
  json body = {{"error",
                {{"message", message},
                 {"type", type},
                 {"param", NullIfEmpty(param)},
                 {"code", NullIfEmpty(code)}}}};
  HttpResponse response;
  response.status = status;
  response.body = body.dump();
  if (status < 500) response.headers.push_back({"x-should-retry", "false"});
  return response;
}

// A Status from the domain as an error response.
HttpResponse FromStatus(const Status& status, const std::string& param = "") {
  if (IsDiskFull(status)) {
    // 507 Insufficient Storage; retrying at once would find the disk as full.
    HttpResponse full = Error(507, status.message(), "", "insufficient_storage");
    full.headers.push_back({"x-should-retry", "false"});
    return full;
  }
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return Error(400, status.message(), param);
    case StatusCode::kNotFound:
      return Error(404, status.message(), param, "not_found");
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
      return Error(409, status.message(), param, "conflict");
    case StatusCode::kResourceExhausted:
      return Error(413, status.message(), param, "request_too_large");
    case StatusCode::kUnavailable:
      return Error(503, status.message());
    default:
      return Error(500, status.message());
  }
}

HttpResponse Json(const json& value) {
  HttpResponse response;
  response.body = value.dump();
  return response;
}

HttpResponse JsonText(std::string text) {
  HttpResponse response;
  response.body = std::move(text);
  return response;
}

json Seconds(int64_t ms) { return ms == 0 ? json(nullptr) : json(ms / 1000); }

// ---------------------------------------------------------------- ids and auth

// "file-7" -> 7; nullopt for anything else.
std::optional<int64_t> ParseId(const std::string& text, const std::string& prefix) {
  if (text.size() <= prefix.size() || text.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  int64_t id = 0;
  for (size_t i = prefix.size(); i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || id > (INT64_MAX - 9) / 10) return std::nullopt;
    id = id * 10 + (text[i] - '0');
  }
  if (id <= 0) return std::nullopt;
  return id;
}

std::string FileId(int64_t id) { return "file-" + std::to_string(id); }
std::string BatchId(int64_t id) { return "batch_" + std::to_string(id); }

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// As the gRPC service authorises a client: OK, or the error response.
std::optional<HttpResponse> Unauthorized(const HttpRequest& request,
                                         const BatchApiOptions& options) {
  if (options.client_token.empty() && options.worker_token.empty()) return std::nullopt;
  const std::string value = request.Header("authorization");
  if (value.empty()) {
    return Error(401, "missing 'Authorization: Bearer TOKEN' header", "", "invalid_api_key");
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (value.compare(0, kBearer.size(), kBearer) != 0) {
    return Error(401, "authorization is not a bearer token", "", "invalid_api_key");
  }
  const std::string_view token = std::string_view(value).substr(kBearer.size());
  if (!options.client_token.empty() && ConstantTimeEquals(token, options.client_token)) {
    return std::nullopt;
  }
  if (!options.worker_token.empty() && ConstantTimeEquals(token, options.worker_token)) {
    return Error(403, "a worker token cannot use the Batch API", "", "permission_denied");
  }
  return Error(401, "invalid token", "", "invalid_api_key");
}

// A query parameter as a count in [low, high]; `fallback` when absent.
StatusOr<int64_t> QueryInt(const HttpRequest& request, const std::string& name, int64_t fallback,
                           int64_t low, int64_t high) {
  auto it = request.query.find(name);
  if (it == request.query.end() || it->second.empty()) return fallback;
  auto value = ParseId("n" + it->second, "n");
  if (!value || *value < low || *value > high) {
    return InvalidArgument(name + " must be an integer in [" + std::to_string(low) + ", " +
                           std::to_string(high) + "]");
  }
  return *value;
}

json FileJson(const FileRecord& f) {
  return {{"id", FileId(f.id)},       {"object", "file"},
          {"bytes", f.bytes},         {"created_at", f.created_at_ms / 1000},
          {"filename", f.filename},   {"purpose", f.purpose},
          {"status", "processed"},    {"expires_at", nullptr},
          {"status_details", nullptr}};
}

// Closes a file descriptor and removes a temporary file unless released.
class TempFile {
 public:
  TempFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  Status Write(const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return FileError("writing the upload", errno);
      data += n;
      size -= static_cast<size_t>(n);
    }
    return Status::Ok();
  }
  Status Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? Status::Ok() : FileError("closing the upload", errno);
  }
  const std::string& path() const { return path_; }
  void Release() { path_.clear(); }

 private:
  int fd_;
  std::string path_;
};

// The job's line in an output or error file.
api::ResultLine ResultOf(const JobView& view) {
  const Job& job = view.job;
  api::ResultLine line;
  line.job_id = job.id;
  line.custom_id = job.spec.custom_id;
  line.model = job.spec.model;
  line.endpoint = job.spec.endpoint;
  line.finished_at_ms = job.updated_at_ms;
  switch (job.state) {
    case JobState::kSucceeded:
      line.outcome = api::LineOutcome::kSucceeded;
      if (view.result && view.result->ok) line.output = view.result->output;
      break;
    case JobState::kCancelled:
      line.outcome = job.reason.rfind(kExpiredReason, 0) == 0 ? api::LineOutcome::kExpired
                                                              : api::LineOutcome::kCancelled;
      line.error = job.reason;
      break;
    default:
      line.outcome = api::LineOutcome::kFailed;
      line.error = view.result && !view.result->ok ? view.result->error : job.reason;
      break;
  }
  return line;
}

// errors.data[] entries: one per bad line, its reasons joined, for the first
// kMaxErrorLines bad lines; when there are more, a last entry (code
// "too_many_errors", line null) counts them, so a batch's JSON stays small
// whatever the file.
json LineErrors(std::vector<api::LineError> errors) {
  std::stable_sort(
      errors.begin(), errors.end(),
      [](const api::LineError& a, const api::LineError& b) { return a.line < b.line; });
  json data = json::array();
  int64_t bad_lines = 0;
  for (size_t i = 0; i < errors.size();) {
    std::string message = errors[i].reason;
    size_t j = i + 1;
    for (; j < errors.size() && errors[j].line == errors[i].line; ++j) {
      message += "; " + errors[j].reason;
    }
    if (++bad_lines <= kMaxErrorLines) {
      data.push_back({{"code", "invalid_request"},
                      {"message", message},
                      {"param", nullptr},
                      {"line", errors[i].line}});
    }
    i = j;
  }
  if (bad_lines > kMaxErrorLines) {
    const int64_t more = bad_lines - kMaxErrorLines;
    data.push_back(
        {{"code", "too_many_errors"},
         {"message", "... and " + std::to_string(more) + " more bad line" + (more == 1 ? "" : "s") +
                         " (" + std::to_string(bad_lines) + " in all); the first " +
                         std::to_string(kMaxErrorLines) + " are listed"},
         {"param", nullptr},
         {"line", nullptr}});
  }
  return data;
}

json FileError(const std::string& code, const std::string& message) {
  return json::array(
      {{{"code", code}, {"message", message}, {"param", nullptr}, {"line", nullptr}}});
}

}  // namespace

StatusOr<int64_t> ParseCompletionWindow(const std::string& text) {
  const auto bad = [&] {
    return InvalidArgument("completion_window '" + text +
                           "' must be 24h, or <N>s, <N>m or <N>h up to 24h");
  };
  if (text.size() < 2) return bad();
  const char unit = text.back();
  const int64_t scale = unit == 's' ? 1000 : unit == 'm' ? 60'000 : unit == 'h' ? 3600'000 : 0;
  auto count = ParseId("n" + text.substr(0, text.size() - 1), "n");
  if (scale == 0 || !count || *count > kDayMs / scale || *count * scale > kDayMs) return bad();
  return *count * scale;
}

BatchApi::BatchApi(Scheduler* scheduler, Store* store, ApiStore* files, Clock* clock,
                   BatchApiOptions options)
    : scheduler_(scheduler),
      store_(store),
      files_(files),
      clock_(clock),
      options_(std::move(options)) {}

BatchApi::~BatchApi() { Stop(); }

void BatchApi::Start() {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (runner_.joinable()) return;
  stopping_ = false;
  runner_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(run_mu_);
    while (!stopping_) {
      lock.unlock();
      Step();
      lock.lock();
      run_cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms),
                       [this] { return stopping_ || woken_; });
      woken_ = false;
    }
  });
}

void BatchApi::Stop() {
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (runner_.joinable()) runner_.join();
}

void BatchApi::Wake() {
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    woken_ = true;
  }
  run_cv_.notify_all();
}

// ---------------------------------------------------------------- routing

HttpResponse BatchApi::Handle(const HttpRequest& request) {
  if (auto refused = Unauthorized(request, options_)) return *refused;
  return Route(request);
}

HttpResponse BatchApi::Route(const HttpRequest& request) {
  std::vector<std::string> parts;
  for (size_t at = 0; at <= request.path.size();) {
    const size_t slash = request.path.find('/', at);
    const size_t end = slash == std::string::npos ? request.path.size() : slash;
    if (end > at) parts.push_back(request.path.substr(at, end - at));
    at = end + 1;
  }
  const std::string& m = request.method;
  const auto unknown = [&] {
    return Error(404, "Unknown request URL: " + m + " " + request.path, "", "unknown_url");
  };
  const auto not_allowed = [&] {
    return Error(405, "method " + m + " is not allowed on " + request.path, "",
                 "method_not_allowed");
  };
  if (parts.size() < 2 || parts[0] != "v1") return unknown();
  const std::string& kind = parts[1];
  if (kind == "models") {
    if (parts.size() > 3) return unknown();
    if (m != "GET") return not_allowed();
    if (parts.size() == 2) return Models();
    HttpResponse all = Models();
    if (all.status != 200) return all;
    const json models = json::parse(all.body);
    for (const auto& model : models["data"]) {
      if (model["id"] == parts[2]) return Json(model);
    }
    return Error(404, "no connected worker serves the model '" + parts[2] + "'", "model",
                 "model_not_found");
  }
  if (kind == "files") {
    if (parts.size() == 2) {
      if (m == "POST") return UploadFile(request);
      if (m == "GET") return ListFiles(request);
      return not_allowed();
    }
    if (parts.size() > 4 || (parts.size() == 4 && parts[3] != "content")) return unknown();
    auto id = ParseId(parts[2], "file-");
    if (!id) return Error(404, "no file " + parts[2] + " (ids look like file-7)", "file_id");
    if (parts.size() == 4) return m == "GET" ? FileContent(*id) : not_allowed();
    if (m == "GET") return GetFile(*id);
    if (m == "DELETE") return DeleteFile(*id);
    return not_allowed();
  }
  if (kind == "batches") {
    if (parts.size() == 2) {
      if (m == "POST") return CreateBatch(request);
      if (m == "GET") return ListBatches(request);
      return not_allowed();
    }
    if (parts.size() > 4 || (parts.size() == 4 && parts[3] != "cancel")) return unknown();
    auto id = ParseId(parts[2], "batch_");
    if (!id) return Error(404, "no batch " + parts[2] + " (ids look like batch_7)", "batch_id");
    if (parts.size() == 4) return m == "POST" ? CancelBatch(*id) : not_allowed();
    return m == "GET" ? GetBatch(*id) : not_allowed();
  }
  return unknown();
}

// ---------------------------------------------------------------- models

HttpResponse BatchApi::Models() {
  auto workers = scheduler_->ListWorkers();
  if (!workers.ok()) return FromStatus(workers.status());
  struct Served {
    int64_t workers = 0;
    int64_t context = 0;
  };
  std::map<std::string, Served> models;
  for (const WorkerStatus& w : *workers) {
    if (!w.info.connected) continue;
    for (const ModelOffer& offer : w.info.models) {
      Served& s = models[offer.name];
      ++s.workers;
      s.context = std::max(s.context, offer.max_context_tokens);
    }
  }
  json data = json::array();
  for (const auto& [name, s] : models) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "nightshift"},
                    {"workers", s.workers},
                    {"context_length", s.context == 0 ? json(nullptr) : json(s.context)}});
  }
  return Json({{"object", "list"}, {"data", data}});
}

// ---------------------------------------------------------------- files

HttpResponse BatchApi::UploadFile(const HttpRequest& request) {
  auto boundary = MultipartBoundary(request.Header("content-type"));
  if (!boundary.ok()) return FromStatus(boundary.status());
  const int64_t limit = options_.max_upload_bytes;
  if (request.content_length && *request.content_length > limit + kMultipartSlack) {
    HttpResponse refused = Error(413,
                                 "the upload is " + std::to_string(*request.content_length) +
                                     " bytes; files may be at most " + std::to_string(limit) +
                                     " bytes (--http-max-upload-bytes)",
                                 "file", "file_too_large");
    refused.close = true;
    return refused;
  }
  MultipartReader parts(*boundary, request.body);
  std::optional<std::string> purpose;
  std::optional<TempFile> upload;
  std::string filename;
  int64_t bytes = 0;
  std::vector<char> buffer(kIoChunk);
  MultipartPart part;
  while (true) {
    auto next = parts.Next(&part);
    if (!next.ok()) return FromStatus(next.status());
    if (!*next) break;
    if (part.name == "purpose") {
      std::string value;
      while (true) {
        auto n = parts.Read(buffer.data(), buffer.size());
        if (!n.ok()) return FromStatus(n.status());
        if (*n == 0) break;
        value.append(buffer.data(), *n);
        if (value.size() > 256) return Error(400, "purpose is too long", "purpose");
      }
      purpose = value;
    } else if (part.name == "file") {
      if (upload) return Error(400, "the request has more than one file", "file");
      int fd = -1;
      auto path = files_->CreateTemporary(&fd);
      if (!path.ok()) return FromStatus(path.status());
      upload.emplace(fd, *path);
      filename = part.filename.empty() ? "upload.jsonl" : part.filename;
      while (true) {
        auto n = parts.Read(buffer.data(), buffer.size());
        if (!n.ok()) return FromStatus(n.status());
        if (*n == 0) break;
        bytes += static_cast<int64_t>(*n);
        if (bytes > limit) {
          HttpResponse refused = Error(413,
                                       "the file is over " + std::to_string(limit) +
                                           " bytes, the most a file may be "
                                           "(--http-max-upload-bytes)",
                                       "file", "file_too_large");
          refused.close = true;
          return refused;
        }
        Status written = upload->Write(buffer.data(), *n);
        if (!written.ok()) {
          // The rest of the body is not read: the connection ends with the answer.
          HttpResponse refused = FromStatus(written, "file");
          refused.close = true;
          return refused;
        }
      }
    }  // other fields are ignored, as OpenAI does
  }
  if (!upload) return Error(400, "the request has no 'file' field", "file");
  if (!purpose) return Error(400, "the request has no 'purpose' field", "purpose");
  if (*purpose != kPurposeBatch) {
    return Error(400, "purpose '" + *purpose + "' is not supported; only 'batch' is", "purpose");
  }
  Status closed = upload->Close();
  if (!closed.ok()) return FromStatus(closed);
  auto file = files_->AddUpload(upload->path(), filename, bytes);
  upload->Release();  // AddUpload has moved or removed it
  if (!file.ok()) return FromStatus(file.status());
  return Json(FileJson(*file));
}

HttpResponse BatchApi::ListFiles(const HttpRequest& request) {
  auto limit = QueryInt(request, "limit", 10000, 1, 10000);
  if (!limit.ok()) return FromStatus(limit.status(), "limit");
  int64_t after = 0;
  if (auto it = request.query.find("after"); it != request.query.end() && !it->second.empty()) {
    auto id = ParseId(it->second, "file-");
    if (!id) return Error(400, "after must be a file id (file-7)", "after");
    after = *id;
  }
  std::string order = "desc";
  if (auto it = request.query.find("order"); it != request.query.end()) order = it->second;
  if (order != "asc" && order != "desc") return Error(400, "order must be asc or desc", "order");
  std::string purpose;
  if (auto it = request.query.find("purpose"); it != request.query.end()) purpose = it->second;
  auto files = files_->ListFiles(purpose, after, static_cast<int>(*limit) + 1, order == "asc");
  if (!files.ok()) return FromStatus(files.status());
  const bool has_more = static_cast<int64_t>(files->size()) > *limit;
  if (has_more) files->pop_back();
  json data = json::array();
  for (const FileRecord& f : *files) data.push_back(FileJson(f));
  return Json({{"object", "list"},
               {"data", data},
               {"first_id", files->empty() ? json(nullptr) : json(FileId(files->front().id))},
               {"last_id", files->empty() ? json(nullptr) : json(FileId(files->back().id))},
               {"has_more", has_more}});
}

HttpResponse BatchApi::GetFile(int64_t id) {
  auto file = files_->GetFile(id);
  if (!file.ok()) return FromStatus(file.status(), "file_id");
  return Json(FileJson(*file));
}

HttpResponse BatchApi::FileContent(int64_t id) {
  auto file = files_->GetFile(id);
  if (!file.ok()) return FromStatus(file.status(), "file_id");
  HttpResponse response;
  response.content_type = "application/octet-stream";
  response.headers.push_back(
      {"content-disposition", "attachment; filename=\"" + file->filename + "\""});
  if (file->purpose == kPurposeBatch) {
    const std::string path = files_->PathOf(*file);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error(500, "the bytes of " + FileId(id) + " are missing from the disk");
    struct stat st {};
    ::fstat(fd, &st);
    auto shared_fd = std::make_shared<TempFile>(fd, "");
    response.stream_length = st.st_size;
    response.stream = [fd, shared_fd](BodyWriter& out) -> Status {
      std::vector<char> buffer(kIoChunk);
      while (true) {
        const ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Unavailable(std::string("reading the file: ") + std::strerror(errno));
        if (n == 0) return Status::Ok();
        NS_RETURN_IF_ERROR(out.Write(std::string_view(buffer.data(), static_cast<size_t>(n))));
      }
    };
    return response;
  }
  const bool errors = file->purpose == kPurposeError;
  const int64_t submission = file->submission_id;
  response.stream_length = file->bytes;
  response.stream = [this, submission, errors](BodyWriter& out) -> Status {
    // Lines go out in pieces of about kIoChunk bytes.
    std::string pending;
    auto rendered = RenderLines(submission, errors, [&](std::string_view line) -> Status {
      pending.append(line);
      if (pending.size() < kIoChunk) return Status::Ok();
      Status status = out.Write(pending);
      pending.clear();
      return status;
    });
    if (!rendered.ok()) return rendered.status();
    return pending.empty() ? Status::Ok() : out.Write(pending);
  };
  return response;
}

HttpResponse BatchApi::DeleteFile(int64_t id) {
  Status deleted = files_->DeleteFile(id);
  if (!deleted.ok()) return FromStatus(deleted, "file_id");
  return Json({{"id", FileId(id)}, {"object", "file"}, {"deleted", true}});
}

// ---------------------------------------------------------------- batches

HttpResponse BatchApi::CreateBatch(const HttpRequest& request) {
  auto text = ReadAll(*request.body, kMaxJsonBody);
  if (!text.ok()) return FromStatus(text.status());
  const nlohmann::json body = nlohmann::json::parse(*text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return Error(400, "the request body must be a JSON object");
  }
  const auto string_field = [&](const char* name) -> std::optional<std::string> {
    auto it = body.find(name);
    if (it == body.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  auto input = string_field("input_file_id");
  if (!input) return Error(400, "input_file_id (a file id) is required", "input_file_id");
  auto file_id = ParseId(*input, "file-");
  auto file = file_id ? files_->GetFile(*file_id) : StatusOr<FileRecord>(NotFound(""));
  if (!file.ok()) return Error(400, "no file " + *input, "input_file_id", "invalid_file");
  if (file->purpose != kPurposeBatch) {
    return Error(400, *input + " has purpose " + file->purpose + ", not batch", "input_file_id",
                 "invalid_file");
  }
  auto endpoint = string_field("endpoint");
  if (!endpoint || (*endpoint != "/v1/completions" && *endpoint != "/v1/chat/completions")) {
    return Error(400,
                 "endpoint must be /v1/completions or /v1/chat/completions" +
                     (endpoint ? ", not " + *endpoint : std::string()),
                 "endpoint");
  }
  auto window_text = string_field("completion_window");
  if (!window_text) {
    return Error(400, "completion_window (24h, or <N>s|m|h up to 24h) is required",
                 "completion_window");
  }
  auto window = ParseCompletionWindow(*window_text);
  if (!window.ok()) return FromStatus(window.status(), "completion_window");
  std::string metadata;
  if (auto it = body.find("metadata"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || it->size() > 16) {
      return Error(400, "metadata must be an object of at most 16 string values", "metadata");
    }
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      if (kv.key().size() > 64 || !kv->is_string() ||
          kv->get_ref<const std::string&>().size() > 512) {
        return Error(400,
                     "metadata keys are at most 64 characters and values strings of at most 512",
                     "metadata");
      }
    }
    metadata = it->dump();
  }
  // The submission exists from now on (its id is the batch's); it stays
  // open, so nothing of it is scheduled, until validation submits its jobs.
  SubmitChunk open;
  open.keep_open = true;
  auto submission = store_->Submit(open);
  if (!submission.ok()) return FromStatus(submission.status());
  BatchRecord batch;
  batch.submission_id = submission->submission_id;
  batch.input_file_id = file->id;
  batch.endpoint = *endpoint;
  batch.completion_window = *window_text;
  batch.window_ms = *window;
  batch.metadata = metadata;
  batch.status = "validating";
  batch.created_at_ms = clock_->NowMs();
  Status created = files_->CreateBatch(batch);
  if (!created.ok()) return FromStatus(created);
  Wake();
  auto out = BatchJson(batch);
  if (!out.ok()) return FromStatus(out.status());
  return JsonText(*out);
}

HttpResponse BatchApi::ListBatches(const HttpRequest& request) {
  auto limit = QueryInt(request, "limit", 20, 1, 100);
  if (!limit.ok()) return FromStatus(limit.status(), "limit");
  int64_t before = 0;
  if (auto it = request.query.find("after"); it != request.query.end() && !it->second.empty()) {
    auto id = ParseId(it->second, "batch_");
    if (!id) return Error(400, "after must be a batch id (batch_7)", "after");
    before = *id;
  }
  auto batches = files_->ListBatches(before, static_cast<int>(*limit) + 1);
  if (!batches.ok()) return FromStatus(batches.status());
  const bool has_more = static_cast<int64_t>(batches->size()) > *limit;
  if (has_more) batches->pop_back();
  std::string data = "[";
  for (const BatchRecord& b : *batches) {
    auto one = BatchJson(b);
    if (!one.ok()) return FromStatus(one.status());
    data += (data.size() > 1 ? "," : "") + *one;
  }
  data += "]";
  json page = {
      {"object", "list"},
      {"data", json::parse(data)},
      {"first_id",
       batches->empty() ? json(nullptr) : json(BatchId(batches->front().submission_id))},
      {"last_id", batches->empty() ? json(nullptr) : json(BatchId(batches->back().submission_id))},
      {"has_more", has_more}};
  return Json(page);
}

HttpResponse BatchApi::GetBatch(int64_t id) {
  auto batch = files_->GetBatch(id);
  if (!batch.ok()) return FromStatus(batch.status(), "batch_id");
  auto out = BatchJson(*batch);
  if (!out.ok()) return FromStatus(out.status());
  return JsonText(*out);
}

HttpResponse BatchApi::CancelBatch(int64_t id) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto batch = files_->GetBatch(id);
    if (!batch.ok()) return FromStatus(batch.status(), "batch_id");
    const std::string was = batch->status;
    if (was == "cancelling" || was == "cancelled") return GetBatch(id);
    if (was != "validating" && was != "in_progress") {
      return Error(409, "batch_" + std::to_string(id) + " is " + was + "; it cannot be cancelled",
                   "batch_id", "conflict");
    }
    batch->status = "cancelling";
    batch->cancelling_at_ms = clock_->NowMs();
    Status updated = files_->UpdateBatch(*batch, was);
    if (updated.code() == StatusCode::kFailedPrecondition) continue;  // it moved on meanwhile
    if (!updated.ok()) return FromStatus(updated);
    // Jobs stop at once (running ones are told); finished results are kept.
    // A validating batch is stopped by the runner before it submits.
    if (was == "in_progress") {
      auto cancelled = scheduler_->CancelSubmission(id);
      if (!cancelled.ok())
        Log("cancelling batch_" + std::to_string(id) + ": " + cancelled.status().ToString());
    }
    Wake();
    return GetBatch(id);
  }
  return Error(409, "batch_" + std::to_string(id) + " changed while being cancelled; try again",
               "batch_id", "conflict");
}

StatusOr<std::string> BatchApi::BatchJson(const BatchRecord& b) {
  NS_ASSIGN_OR_RETURN(Submission submission, store_->GetSubmission(b.submission_id));
  std::string status = b.status;
  // Every job is done but the runner has not finalized it yet.
  if (status == "in_progress" && submission.done() && b.expired_at_ms == 0) status = "finalizing";
  const bool counted = status != "validating" && status != "failed";
  const StateCounts& c = submission.counts;
  json errors = nullptr;
  if (!b.errors.empty()) {
    errors = {{"object", "list"}, {"data", json::parse(b.errors, nullptr, false)}};
  }
  json out = {
      {"id", BatchId(b.submission_id)},
      {"object", "batch"},
      {"endpoint", b.endpoint},
      {"errors", errors},
      {"input_file_id", FileId(b.input_file_id)},
      {"completion_window", b.completion_window},
      {"status", status},
      {"output_file_id", b.output_file_id == 0 ? json(nullptr) : json(FileId(b.output_file_id))},
      {"error_file_id", b.error_file_id == 0 ? json(nullptr) : json(FileId(b.error_file_id))},
      {"created_at", b.created_at_ms / 1000},
      {"in_progress_at", Seconds(b.in_progress_at_ms)},
      {"expires_at", (b.created_at_ms + b.window_ms) / 1000},
      {"finalizing_at", Seconds(b.finalizing_at_ms)},
      {"completed_at", Seconds(b.completed_at_ms)},
      {"failed_at", Seconds(b.failed_at_ms)},
      {"expired_at", Seconds(b.expired_at_ms)},
      {"cancelling_at", Seconds(b.cancelling_at_ms)},
      {"cancelled_at", Seconds(b.cancelled_at_ms)},
      {"request_counts",
       {{"total", counted ? c.total() : 0},
        {"completed", counted ? c.succeeded : 0},
        {"failed", counted ? c.failed : 0}}},
      {"metadata", b.metadata.empty() ? json(nullptr) : json::parse(b.metadata, nullptr, false)}};
  return out.dump();
}

StatusOr<int64_t> BatchApi::RenderLines(int64_t submission_id, bool errors,
                                        const std::function<Status(std::string_view)>& sink) {
  JobFilter filter;
  filter.submission_id = submission_id;
  filter.with_results = true;
  int64_t after = 0, lines = 0;
  while (true) {
    NS_ASSIGN_OR_RETURN(JobPage page, scheduler_->ListJobs(filter, after, 200));
    for (const JobView& view : page.jobs) {
      if (!IsTerminal(view.job.state)) continue;
      if ((view.job.state != JobState::kSucceeded) != errors) continue;
      NS_RETURN_IF_ERROR(sink(api::BatchOutputLine(ResultOf(view)).dump() + "\n"));
      ++lines;
    }
    if (page.next_after_id == 0 || page.jobs.empty()) return lines;
    after = page.jobs.back().job.id;
  }
}

// ---------------------------------------------------------------- the runner

void BatchApi::Step() {
  auto batches = files_->OpenBatches();
  if (!batches.ok()) {
    Log("reading open batches: " + batches.status().ToString());
    return;
  }
  for (BatchRecord& batch : *batches) {
    const int64_t id = batch.submission_id;
    Status status =
        batch.status == "validating" ? Validate(std::move(batch)) : Advance(std::move(batch));
    // Another writer (a cancel) moving the batch on is not an error: the next round sees it.
    if (!status.ok() && status.code() != StatusCode::kFailedPrecondition) {
      Log("batch_" + std::to_string(id) + ": " + status.ToString());
    }
  }
}

Status BatchApi::Validate(BatchRecord batch) {
  const int64_t id = batch.submission_id;
  const auto cancelled = [&] {
    auto now = files_->GetBatch(id);
    return now.ok() && now->status != "validating";
  };
  auto file = files_->GetFile(batch.input_file_id);
  if (!file.ok()) {
    return FailValidation(
        batch, FileError("invalid_file",
                         "the input file " + FileId(batch.input_file_id) + " no longer exists")
                   .dump());
  }
  const std::string path = files_->PathOf(*file);
  std::vector<api::LineError> problems;
  std::vector<JobSpec> chunk;
  std::vector<int64_t> lines;
  int64_t requests = 0;
  bool too_many = false, stopped = false;
  const auto check = [&] {
    for (const JobProblem& p : scheduler_->CheckJobs(chunk)) {
      problems.push_back({lines[p.index], p.reason});
    }
    chunk.clear();
    lines.clear();
  };
  // Pass 1: check every line, storing nothing.
  api::BatchInputSummary summary;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Unavailable("cannot read " + path);
    summary = api::ParseBatchInput(in, {}, [&](JobSpec spec, int64_t line) {
      if (++requests > options_.max_batch_requests) {
        too_many = true;
        return false;
      }
      if (api::EndpointUrl(spec.endpoint) != batch.endpoint) {
        problems.push_back({line, std::string("url ") + api::EndpointUrl(spec.endpoint) +
                                      " is not the batch's endpoint " + batch.endpoint});
        return true;
      }
      chunk.push_back(std::move(spec));
      lines.push_back(line);
      if (chunk.size() >= options_.chunk_jobs) {
        check();
        if (cancelled()) {
          stopped = true;
          return false;
        }
      }
      return true;
    });
  }
  if (stopped) return Status::Ok();  // cancelled meanwhile: Advance ends it
  check();
  std::set<int64_t> bad_lines;
  for (const api::LineError& e : summary.errors) bad_lines.insert(e.line);
  if (too_many ||
      summary.job_count + static_cast<int64_t>(bad_lines.size()) > options_.max_batch_requests) {
    return FailValidation(
        batch,
        FileError("too_many_requests",
                  "the input file has more than " + std::to_string(options_.max_batch_requests) +
                      " requests, the most one batch takes (--http-max-batch-requests)")
            .dump());
  }
  problems.insert(problems.end(), summary.errors.begin(), summary.errors.end());
  if (!problems.empty()) return FailValidation(batch, LineErrors(problems).dump());
  if (summary.job_count == 0) {
    return FailValidation(batch, FileError("empty_file", "the input file has no requests").dump());
  }
  if (cancelled()) return Status::Ok();

  // Pass 2: submit in chunks; after a restart, the chunks already stored are skipped.
  NS_ASSIGN_OR_RETURN(Submission stored, store_->GetSubmission(id));
  const int64_t total = summary.job_count;
  int64_t sent = stored.counts.total();
  if (!stored.sealed && sent >= total) {
    SubmitChunk seal;
    seal.submission_id = id;
    NS_RETURN_IF_ERROR(store_->Submit(seal).status());
  }
  Status submitted = Status::Ok();
  std::vector<JobSpec> refused;
  if (!stored.sealed && sent < total) {
    int64_t skip = sent;
    std::ifstream in(path, std::ios::binary);
    if (!in) return Unavailable("cannot read " + path);
    const auto flush = [&] {
      SubmitRequest request;
      request.submission_id = id;
      request.keep_open = sent + static_cast<int64_t>(chunk.size()) < total;
      request.jobs = chunk;
      auto reply = scheduler_->Submit(std::move(request));
      if (!reply.ok()) {
        submitted = reply.status();
        refused = std::move(chunk);
        return false;
      }
      sent += static_cast<int64_t>(chunk.size());
      chunk.clear();
      lines.clear();
      return !cancelled();
    };
    api::ParseBatchInput(in, {}, [&](JobSpec spec, int64_t line) {
      if (skip > 0) {
        --skip;
        return true;
      }
      chunk.push_back(std::move(spec));
      lines.push_back(line);
      return chunk.size() < options_.chunk_jobs || flush();
    });
    if (submitted.ok() && !chunk.empty()) flush();
  }
  if (submitted.code() == StatusCode::kInvalidArgument) {
    // Something changed since pass 1 (a tokenizer arrived): name the lines.
    for (const JobProblem& p : scheduler_->CheckJobs(refused)) {
      problems.push_back({lines[p.index], p.reason});
    }
    if (problems.empty()) {
      return FailValidation(batch, FileError("invalid_request", submitted.message()).dump());
    }
    return FailValidation(batch, LineErrors(problems).dump());
  }
  if (!submitted.ok()) return submitted;  // retried next round
  if (cancelled()) return Status::Ok();
  batch.status = "in_progress";
  batch.in_progress_at_ms = clock_->NowMs();
  return files_->UpdateBatch(batch, "validating");
}

Status BatchApi::FailValidation(BatchRecord batch, const std::string& errors) {
  // Sealed and cancelled first: a crash after this re-validates and fails again.
  NS_RETURN_IF_ERROR(
      scheduler_->CancelSubmission(batch.submission_id, "the batch failed validation").status());
  batch.status = "failed";
  batch.errors = errors;
  batch.failed_at_ms = clock_->NowMs();
  return files_->UpdateBatch(batch, "validating");
}

Status BatchApi::Advance(BatchRecord batch) {
  const int64_t id = batch.submission_id;
  NS_ASSIGN_OR_RETURN(Submission submission, store_->GetSubmission(id));
  const int64_t now = clock_->NowMs();
  if (batch.status == "in_progress" && batch.expired_at_ms == 0 && !submission.done() &&
      now >= batch.created_at_ms + batch.window_ms) {
    batch.expired_at_ms = now;
    NS_RETURN_IF_ERROR(files_->UpdateBatch(batch, "in_progress"));
  }
  const bool stop =
      batch.status == "cancelling" || (batch.status == "in_progress" && batch.expired_at_ms != 0);
  if (stop && !submission.done()) {
    const std::string reason =
        batch.status == "cancelling"
            ? std::string("the batch was cancelled")
            : std::string(kExpiredReason) + ": the batch's completion window (" +
                  batch.completion_window + ") passed before this request ran";
    NS_RETURN_IF_ERROR(scheduler_->CancelSubmission(id, reason).status());
    NS_ASSIGN_OR_RETURN(submission, store_->GetSubmission(id));
  }
  if (!submission.done()) return Status::Ok();
  if (batch.status == "cancelling") return Finalize(std::move(batch), "cancelled");
  if (batch.expired_at_ms != 0) return Finalize(std::move(batch), "expired");
  if (batch.status == "in_progress") {
    batch.status = "finalizing";
    batch.finalizing_at_ms = now;
    NS_RETURN_IF_ERROR(files_->UpdateBatch(batch, "in_progress"));
  }
  return Finalize(std::move(batch), "completed");
}

Status BatchApi::Finalize(BatchRecord batch, const std::string& final_status) {
  int64_t bytes[2] = {0, 0};
  int64_t lines[2] = {0, 0};
  for (int errors = 0; errors < 2; ++errors) {
    NS_ASSIGN_OR_RETURN(lines[errors],
                        RenderLines(batch.submission_id, errors == 1, [&](std::string_view line) {
                          bytes[errors] += static_cast<int64_t>(line.size());
                          return Status::Ok();
                        }));
  }
  const std::string was = batch.status;
  const int64_t now = clock_->NowMs();
  batch.status = final_status;
  if (final_status == "completed") batch.completed_at_ms = now;
  if (final_status == "cancelled") batch.cancelled_at_ms = now;
  std::optional<int64_t> output, error;
  if (lines[0] > 0) output = bytes[0];
  if (lines[1] > 0) error = bytes[1];
  return files_->FinalizeBatch(batch, was, output, error);
}

}  // namespace nightshift::scheduler::http
