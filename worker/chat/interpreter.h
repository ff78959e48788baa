// Runs a parsed chat template: walks the syntax tree with Jinja2's scoping
// rules and Python's value semantics (builtins.h) and returns the output.
//
// Scoping follows Jinja2: `for` bodies, macros, call/filter/set blocks and
// `with` get their own scope (assignments inside do not leak out; each loop
// iteration starts afresh from the enclosing values), `if` does not; a
// namespace's attributes are shared and survive every scope. Top-level
// variables shadow the globals (range, namespace, dict, raise_exception,
// strftime_now).
//
// Thread-safety: Render only reads the program; concurrent renders of one
// program are safe.
#pragma once

#include <string>

#include "common/status.h"
#include "worker/chat/ast.h"
#include "worker/chat/value.h"

namespace nightshift::chat {

// Renders `program` with `variables` as the template's top-level names.
// Errors: the template's raise_exception(msg) is InvalidArgument with
// exactly `msg`; other runtime failures (using an undefined value, a type
// error) are InvalidArgument "line N: <Python/Jinja message>"; using an
// unsupported Python method or global is Unimplemented naming it.
StatusOr<std::string> Render(const ast::Program& program, const Dict& variables);

}  // namespace nightshift::chat
