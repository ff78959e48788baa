#include "planner/round.h"

#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace nightshift::planner {
namespace {

// Digits and exponent of the shortest decimal that reads back as x (x finite,
// positive): x == 0.DIGITS * 10^point.
struct ShortestDecimal {
  std::string digits;  // no leading or trailing zeros (except "0" for zero)
  int point = 0;
};

ShortestDecimal Shortest(double x) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    // "%.Ne" rounds the exact value correctly; the first precision that reads
    // back as x is the shortest, and the nearest of that length.
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string text = buf;  // "d.ddde+XX"
  size_t e = text.find('e');
  std::string digits = text.substr(0, 1) + (e > 2 ? text.substr(2, e - 2) : "");
  int exponent = std::atoi(text.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  return {digits, exponent + 1};
}

std::string FixedNotation(const ShortestDecimal& d) {
  int n = static_cast<int>(d.digits.size());
  if (d.point <= 0) return "0." + std::string(-d.point, '0') + d.digits;
  if (d.point >= n) return d.digits + std::string(d.point - n, '0') + ".0";
  return d.digits.substr(0, d.point) + "." + d.digits.substr(d.point);
}

std::string ScientificNotation(const ShortestDecimal& d) {
  std::string out = d.digits.substr(0, 1);
  if (d.digits.size() > 1) out += "." + d.digits.substr(1);
  int exponent = d.point - 1;
  char buf[16];
  std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + buf;
}

}  // namespace

double PyRound(double x, int ndigits) {
  assert(ndigits >= 0 && ndigits <= 30);
  if (!std::isfinite(x)) return x;
  // glibc's printf rounds the exact binary value, ties to even, which is what
  // CPython's round() does through its own correctly rounded dtoa.
  char buf[400];  // DBL_MAX has 309 integer digits
  std::snprintf(buf, sizeof buf, "%.*f", ndigits, x);
  return std::strtod(buf, nullptr);
}

std::string PyRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  std::string sign = std::signbit(x) ? "-" : "";
  if (x == 0) return sign + "0.0";
  ShortestDecimal d = Shortest(std::fabs(x));
  bool fixed = d.point > -4 && d.point <= 16;
  return sign + (fixed ? FixedNotation(d) : ScientificNotation(d));
}

std::string FormatFixed(double x, int decimals) {
  assert(decimals >= 0 && decimals <= 30);
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

}  // namespace nightshift::planner
