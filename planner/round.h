// Python-compatible rounding and float formatting.
//
// The planner's figures are specified by a Python module, so its rounding and
// its printed numbers must match Python's exactly: round() rounds the exact
// binary value of a double to the nearest decimal, ties to even
// (round(2.675, 2) == 2.67 because 2.675 is really 2.67499999...;
// round(0.125, 2) == 0.12 because 0.125 is an exact tie). floor(x*10^n + 0.5)
// gets both of those wrong.
//
// All functions are pure and thread-safe. They assume the default
// floating-point rounding mode (round to nearest), which nothing in this
// project changes.
#pragma once

#include <string>

namespace nightshift::planner {

// Python's round(x, ndigits) for 0 <= ndigits <= 30: the double nearest to
// the decimal obtained by rounding x's exact value to `ndigits` decimals, ties
// to even. round(x) is PyRound(x, 0) (Python returns an int; the value is the
// same). Infinities and NaN are returned unchanged; -0.5 rounds to -0.0.
double PyRound(double x, int ndigits);

// Python's repr(x) / str(x) for a float: the shortest decimal that reads back
// as x, in fixed notation with at least one decimal ("140.0", "0.005",
// "41.176") when the decimal exponent is in [-4, 16), otherwise in scientific
// notation ("1e-05", "1.5e+16"); "inf", "-inf", "nan".
std::string PyRepr(double x);

// Python's f"{x:.{decimals}f}": x's exact value rounded to `decimals`
// decimals, ties to even ("%.1f" of 0.25 is "0.2"). 0 <= decimals <= 30.
std::string FormatFixed(double x, int decimals);

}  // namespace nightshift::planner
