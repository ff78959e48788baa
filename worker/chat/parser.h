// Builds the syntax tree of a chat template from its tokens, following
// Jinja2's grammar (parser.py): statements `if/elif/else`, `for` (tuple
// targets, `if` filter, `else`, `recursive`), `set` (incl. `ns.attr` and
// block form), `macro`, `call`, `filter`, `with`, `print`, `break`,
// `continue` (transformers enables loopcontrols) and `generation`
// (transformers' assistant-mask tag); Jinja's expression precedence, e.g.
// `not x is defined` is `not (x is defined)` and `a + b|length` is
// `a + (b|length)`.
//
// Constructs Jinja has but this interpreter does not (`include`, `extends`,
// `block`, `import`, a filter such as `wordwrap`, `*args` in a call) are
// Unimplemented naming them; names Jinja does not know (an unknown tag,
// filter or test) are InvalidArgument with Jinja's wording. Both start with
// "line N: ".
//
// Pure and thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/chat/ast.h"
#include "worker/chat/lexer.h"

namespace nightshift::chat {

StatusOr<std::unique_ptr<ast::Program>> Parse(std::vector<Token> tokens);

}  // namespace nightshift::chat
