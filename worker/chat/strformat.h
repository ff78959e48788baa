// Python string formatting for templates: printf-style `'%s: %d' % (a, b)`
// (also Jinja's `format` filter) and `'{}: {name}'.format(a, name=b)`.
//
// Supported: for `%`, the conversions s r a d i u x X o c e E f F g G and
// %%, flags `-+ #0`, width and precision (numbers or `*`), and `%(key)s`
// with a dict; for str.format, `{}`/`{0}`/`{name}` fields with an optional
// `!s`/`!r`/`!a` conversion and `{{`/`}}`. A format spec after `:` or a
// field path (`{0.name}`, `{0[1]}`) in str.format is Unimplemented.
// Argument mismatches raise Python's TypeError/ValueError messages.
//
// Errors are thrown as TemplateError (error.h). Pure and thread-safe.
#pragma once

#include <string>

#include "worker/chat/builtins.h"
#include "worker/chat/value.h"

namespace nightshift::chat {

// Python `format % args`: a tuple is the argument list, a dict serves
// `%(key)s`, anything else is the single argument.
std::string PercentFormat(const std::string& format, const Value& args);

// Python `format.format(*args, **kwargs)`.
std::string StrFormat(const std::string& format, const CallArgs& args);

}  // namespace nightshift::chat
