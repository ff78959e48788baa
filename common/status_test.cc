#include "common/status.h"

#include <gtest/gtest.h>

namespace nightshift {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  NS_ASSIGN_OR_RETURN(int half, Half(x));
  NS_ASSIGN_OR_RETURN(*out, Half(half));
  return Status::Ok();
}

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  Status st = DataLoss("model.safetensors: truncated");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(st.ToString(), "data_loss: model.safetensors: truncated");
  EXPECT_EQ(st.Prefixed("ckpt").message(), "ckpt: model.safetensors: truncated");
  EXPECT_EQ(Status::Ok().Prefixed("x").ToString(), "ok");
}

TEST(StatusTest, AssignOrReturnPropagatesTheFirstError) {
  int out = -1;
  EXPECT_TRUE(Quarter(12, &out).ok());
  EXPECT_EQ(out, 3);
  Status st = Quarter(6, &out);  // 6 -> 3 is odd
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "odd: 3");
}

}  // namespace
}  // namespace nightshift
