#include "worker/engine/pass_trie.h"

#include <cstddef>
#include <unordered_map>

namespace nightshift::engine {
namespace {

// The trie's nodes as the feeds reach them, before the layout.
class Nodes {
 public:
  // The child of `parent` (-1: a root) for `token`, made when new; counts
  // `feed` among the node's holders once.
  int32_t Child(int32_t parent, int32_t token, int64_t feed) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(parent + 1)) << 32) |
                         static_cast<uint32_t>(token);
    auto [it, made] = index_.try_emplace(key, static_cast<int32_t>(token_.size()));
    const int32_t node = it->second;
    if (made) {
      token_.push_back(token);
      children_.emplace_back();
      holders_.push_back(0);
      last_feed_.push_back(-1);
      (parent < 0 ? roots_ : children_[static_cast<size_t>(parent)]).push_back(node);
    }
    if (last_feed_[static_cast<size_t>(node)] != feed) {
      last_feed_[static_cast<size_t>(node)] = feed;
      ++holders_[static_cast<size_t>(node)];
    }
    return node;
  }

  // The nodes of `tokens` below `parent`, in order.
  std::vector<int32_t> Path(int32_t parent, const std::vector<int32_t>& tokens, int64_t feed) {
    std::vector<int32_t> path;
    path.reserve(tokens.size());
    for (int32_t token : tokens) path.push_back(parent = Child(parent, token, feed));
    return path;
  }

  size_t size() const { return token_.size(); }
  int32_t token(int32_t node) const { return token_[static_cast<size_t>(node)]; }
  int64_t holders(int32_t node) const { return holders_[static_cast<size_t>(node)]; }
  const std::vector<int32_t>& roots() const { return roots_; }
  const std::vector<int32_t>& children(int32_t node) const {
    return children_[static_cast<size_t>(node)];
  }

 private:
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<int32_t> token_;
  std::vector<std::vector<int32_t>> children_;  // in the order feeds reached them
  std::vector<int64_t> holders_;                // feeds holding the node
  std::vector<int64_t> last_feed_;
  std::vector<int32_t> roots_;
};

struct FeedNodes {
  std::vector<int32_t> prompt;
  std::vector<std::vector<int32_t>> labels;
};

std::vector<FeedNodes> Insert(const std::vector<TrieFeed>& feeds, Nodes& nodes) {
  std::vector<FeedNodes> placed;
  placed.reserve(feeds.size());
  for (size_t f = 0; f < feeds.size(); ++f) {
    const int64_t feed = static_cast<int64_t>(f);
    FeedNodes p;
    p.prompt = nodes.Path(-1, feeds[f].prompt, feed);
    const int32_t end = p.prompt.empty() ? -1 : p.prompt.back();
    for (const std::vector<int32_t>& label : feeds[f].labels) {
      p.labels.push_back(nodes.Path(end, label, feed));
    }
    placed.push_back(std::move(p));
  }
  return placed;
}

}  // namespace

PassTrie BuildPassTrie(const std::vector<TrieFeed>& feeds) {
  Nodes nodes;
  const std::vector<FeedNodes> placed = Insert(feeds, nodes);
  PassTrie trie;
  std::vector<int64_t> row_of(nodes.size(), -1);
  // Depth first, iteratively: `path` holds the rows from the root to the
  // row just laid out; a node whose parent is not that row starts a chain.
  std::vector<int32_t> path;
  struct Visit {
    int32_t node;
    int64_t depth;
  };
  std::vector<Visit> stack;
  for (auto root = nodes.roots().rbegin(); root != nodes.roots().rend(); ++root) {
    stack.push_back({*root, 0});
  }
  while (!stack.empty()) {
    const Visit v = stack.back();
    stack.pop_back();
    const int32_t row = static_cast<int32_t>(trie.ids.size());
    const bool continues = !path.empty() && static_cast<int64_t>(path.size()) == v.depth &&
                           !trie.chains.empty() && trie.chains.back().end == row;
    path.resize(static_cast<size_t>(v.depth));
    if (!continues) {
      TrieChain chain;
      chain.begin = chain.end = row;
      chain.depth = v.depth;
      chain.keys = path;
      trie.chains.push_back(std::move(chain));
    }
    TrieChain& chain = trie.chains.back();
    chain.keys.push_back(row);
    ++chain.end;
    path.push_back(row);
    row_of[static_cast<size_t>(v.node)] = row;
    trie.ids.push_back(nodes.token(v.node));
    trie.depth.push_back(v.depth);
    trie.holders.push_back(nodes.holders(v.node));
    if (nodes.holders(v.node) > 1) ++trie.shared_rows;
    const std::vector<int32_t>& children = nodes.children(v.node);
    for (auto child = children.rbegin(); child != children.rend(); ++child) {
      stack.push_back({*child, v.depth + 1});
    }
  }
  auto rows = [&row_of](const std::vector<int32_t>& path_nodes) {
    std::vector<int64_t> out;
    out.reserve(path_nodes.size());
    for (int32_t node : path_nodes) out.push_back(row_of[static_cast<size_t>(node)]);
    return out;
  };
  for (size_t f = 0; f < feeds.size(); ++f) {
    trie.prompt_rows.push_back(rows(placed[f].prompt));
    trie.fed_tokens += static_cast<int64_t>(feeds[f].prompt.size());
    std::vector<std::vector<int64_t>> labels;
    for (size_t j = 0; j < placed[f].labels.size(); ++j) {
      labels.push_back(rows(placed[f].labels[j]));
      trie.fed_tokens += static_cast<int64_t>(feeds[f].labels[j].size());
    }
    trie.label_rows.push_back(std::move(labels));
  }
  return trie;
}

int64_t CountTrieRows(const std::vector<TrieFeed>& feeds) {
  Nodes nodes;
  Insert(feeds, nodes);
  return static_cast<int64_t>(nodes.size());
}

}  // namespace nightshift::engine
