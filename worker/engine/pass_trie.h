// The tokens sequences feed into their first pass, as one trie: every
// distinct prefix is one node, computed once per layer, so sequences that
// share an instruction or a few labelled examples pay for them once.
//
// A feed is a prompt, and a classification's labels as branches after it
// (each label's tokens follow the whole prompt). A node is a token at a
// depth with all the tokens before it: its keys and values are the same in
// every sequence that holds it, so computing it once gives each sequence
// exactly what it would get alone. The nodes are laid out depth first
// (children in the order feeds first reach them), and cut into chains:
// runs of rows each the child of the row before. A row attends to its
// chain's keys up to itself: its ancestors' rows, then its own.
//
// libtorch-free pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace nightshift::engine {

// One sequence's first-pass tokens.
struct TrieFeed {
  std::vector<int32_t> prompt;               // not empty
  std::vector<std::vector<int32_t>> labels;  // each not empty
};

// Rows [begin, end) of the trie, each the child of the row before it; the
// first row's parent is keys[depth - 1] (none at depth 0). Row begin + k
// sits at position depth + k and attends to keys[0, depth + k + 1): the
// rows of its ancestors from the root, then itself.
struct TrieChain {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t depth = 0;
  std::vector<int32_t> keys;  // depth + (end - begin) rows, ascending
};

struct PassTrie {
  std::vector<int32_t> ids;       // each row's token, depth first
  std::vector<int64_t> depth;     // each row's position (0 at a root)
  std::vector<int64_t> holders;   // each row's feeds: those whose prompt or labels hold it
  std::vector<TrieChain> chains;  // in row order; together they cover every row once
  // Per feed: the row of each prompt token, in order.
  std::vector<std::vector<int64_t>> prompt_rows;
  // Per feed and label: the row of each of the label's tokens.
  std::vector<std::vector<std::vector<int64_t>>> label_rows;
  // Rows two or more feeds hold (computed once for all of them).
  int64_t shared_rows = 0;
  // Tokens the feeds hold together: what a pass computes without sharing.
  int64_t fed_tokens = 0;
};

// The trie of `feeds`. Its rows are fewer than fed_tokens whenever two
// feeds (or two labels of one feed) begin alike.
PassTrie BuildPassTrie(const std::vector<TrieFeed>& feeds);

// Rows BuildPassTrie would lay out (distinct prefixes), without the layout.
int64_t CountTrieRows(const std::vector<TrieFeed>& feeds);

}  // namespace nightshift::engine
