#include "scheduler/http/multipart.h"

#include <gtest/gtest.h>

namespace nightshift::scheduler::http {
namespace {

struct Parsed {
  std::vector<MultipartPart> parts;
  std::vector<std::string> data;
  Status status;
};

// Reads every part of `body`, handing it over `piece` bytes at a time and
// reading `read` bytes at a time.
Parsed Parse(const std::string& boundary, const std::string& body, size_t piece, size_t read) {
  StringBody in(body, piece);
  MultipartReader reader(boundary, &in);
  Parsed out;
  std::vector<char> buffer(read);
  while (true) {
    MultipartPart part;
    auto next = reader.Next(&part);
    if (!next.ok()) {
      out.status = next.status();
      return out;
    }
    if (!*next) return out;
    out.parts.push_back(part);
    std::string data;
    while (true) {
      auto n = reader.Read(buffer.data(), buffer.size());
      if (!n.ok()) {
        out.status = n.status();
        return out;
      }
      if (*n == 0) break;
      data.append(buffer.data(), *n);
    }
    out.data.push_back(data);
  }
}

std::string Body(const std::string& file_bytes) {
  return "preamble to ignore\r\n"
         "--XyZ\r\n"
         "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
         "batch\r\n"
         "--XyZ\r\n"
         "Content-Disposition: form-data; name=\"file\"; filename=\"in \\\"1\\\".jsonl\"\r\n"
         "Content-Type: application/jsonl\r\n\r\n" +
         file_bytes +
         "\r\n--XyZ--\r\n"
         "epilogue";
}

TEST(MultipartTest, PartsAndTheirBytesSurviveEverySplitOfTheBody) {
  // Data that begins like a delimiter but is not one (a sender picks a
  // boundary its data does not hold), and CRLFs next to it.
  std::string file = "{\"a\": 1}\r\n--Xy!\r\n\r\nx--XyZ\r\n-";
  for (int i = 0; i < 200'000; ++i) file += static_cast<char>('a' + i % 26);
  file += "\r\n";
  const std::string body = Body(file);
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, size_t{4096}, body.size()}) {
    for (size_t read : {size_t{1}, size_t{5}, size_t{65536}}) {
      if (piece == 1 && read == 1) continue;  // slow and adds nothing
      SCOPED_TRACE("piece " + std::to_string(piece) + ", read " + std::to_string(read));
      Parsed parsed = Parse("XyZ", body, piece, read);
      ASSERT_TRUE(parsed.status.ok()) << parsed.status.ToString();
      ASSERT_EQ(parsed.parts.size(), 2u);
      EXPECT_EQ(parsed.parts[0].name, "purpose");
      EXPECT_EQ(parsed.data[0], "batch");
      EXPECT_EQ(parsed.parts[1].name, "file");
      EXPECT_EQ(parsed.parts[1].filename, "in \"1\".jsonl");
      EXPECT_EQ(parsed.parts[1].content_type, "application/jsonl");
      EXPECT_EQ(parsed.data[1], file);
    }
  }
}

TEST(MultipartTest, AnUnreadPartIsSkipped) {
  StringBody in(Body("skipped bytes"), 5);
  MultipartReader reader("XyZ", &in);
  MultipartPart part;
  ASSERT_TRUE(*reader.Next(&part));
  ASSERT_TRUE(*reader.Next(&part));  // the purpose's bytes were never read
  EXPECT_EQ(part.name, "file");
  char buffer[64];
  std::string data;
  while (true) {
    auto n = reader.Read(buffer, sizeof(buffer));
    ASSERT_TRUE(n.ok());
    if (*n == 0) break;
    data.append(buffer, *n);
  }
  EXPECT_EQ(data, "skipped bytes");
  EXPECT_FALSE(*reader.Next(&part));
}

TEST(MultipartTest, ATruncatedOrMalformedBodyIsAnError) {
  const std::string body = Body("cut here");
  Parsed cut = Parse("XyZ", body.substr(0, body.find("cut here") + 4), 4096, 4096);
  EXPECT_EQ(cut.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status.message().find("ends inside a part"), std::string::npos);

  Parsed no_disposition = Parse("b", "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--", 4096, 64);
  EXPECT_EQ(no_disposition.status.code(), StatusCode::kInvalidArgument);

  Parsed no_close = Parse("b", "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx", 4096, 64);
  EXPECT_EQ(no_close.status.code(), StatusCode::kInvalidArgument);
}

TEST(MultipartTest, TheBoundaryComesFromTheContentType) {
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(*MultipartBoundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b\""), "a b");
  EXPECT_FALSE(MultipartBoundary("application/json").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data").ok());
}

}  // namespace
}  // namespace nightshift::scheduler::http
