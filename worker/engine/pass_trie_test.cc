#include "worker/engine/pass_trie.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace nightshift::engine {
namespace {

// The chain holding `row`.
const TrieChain& ChainOf(const PassTrie& trie, int64_t row) {
  for (const TrieChain& chain : trie.chains) {
    if (row >= chain.begin && row < chain.end) return chain;
  }
  ADD_FAILURE() << "row " << row << " is in no chain";
  static const TrieChain none;
  return none;
}

// The tokens row `row` attends to, in order: its path from the root.
std::vector<int32_t> PathTokens(const PassTrie& trie, int64_t row) {
  const TrieChain& chain = ChainOf(trie, row);
  const int64_t seen = chain.depth + row - chain.begin + 1;
  std::vector<int32_t> tokens;
  for (int64_t k = 0; k < seen; ++k) tokens.push_back(trie.ids[chain.keys[k]]);
  return tokens;
}

// Checks every row of every feed sees exactly its own tokens up to itself,
// at the positions it would have alone.
void ExpectEachFeedSeesItself(const std::vector<TrieFeed>& feeds, const PassTrie& trie) {
  ASSERT_EQ(trie.prompt_rows.size(), feeds.size());
  for (size_t f = 0; f < feeds.size(); ++f) {
    const std::vector<int32_t>& prompt = feeds[f].prompt;
    ASSERT_EQ(trie.prompt_rows[f].size(), prompt.size());
    for (size_t k = 0; k < prompt.size(); ++k) {
      const int64_t row = trie.prompt_rows[f][k];
      EXPECT_EQ(trie.depth[row], static_cast<int64_t>(k));
      EXPECT_EQ(PathTokens(trie, row), std::vector<int32_t>(prompt.begin(), prompt.begin() + k + 1))
          << "feed " << f << " token " << k;
    }
    ASSERT_EQ(trie.label_rows[f].size(), feeds[f].labels.size());
    for (size_t j = 0; j < feeds[f].labels.size(); ++j) {
      std::vector<int32_t> path = prompt;
      for (size_t k = 0; k < feeds[f].labels[j].size(); ++k) {
        path.push_back(feeds[f].labels[j][k]);
        const int64_t row = trie.label_rows[f][j][k];
        EXPECT_EQ(trie.depth[row], static_cast<int64_t>(path.size()) - 1);
        EXPECT_EQ(PathTokens(trie, row), path) << "feed " << f << " label " << j << " token " << k;
      }
    }
  }
}

TEST(PassTrieTest, ASharedPrefixIsLaidOutOnceAndEachFeedSeesOnlyItsOwnPath) {
  // A+B+x, A+y, A+B+z with A = {1, 2}, B = {3}.
  const std::vector<TrieFeed> feeds = {{{1, 2, 3, 7}, {}}, {{1, 2, 8}, {}}, {{1, 2, 3, 9}, {}}};
  const PassTrie trie = BuildPassTrie(feeds);
  EXPECT_EQ(trie.ids, (std::vector<int32_t>{1, 2, 3, 7, 9, 8}));
  EXPECT_EQ(trie.depth, (std::vector<int64_t>{0, 1, 2, 3, 3, 2}));
  EXPECT_EQ(trie.fed_tokens, 11);
  EXPECT_EQ(trie.shared_rows, 3);  // 1 and 2 by all three, 3 by two
  EXPECT_EQ(trie.holders, (std::vector<int64_t>{3, 3, 2, 1, 1, 1}));
  // Chains: 1 2 3 7 in order, then 9 after 1 2 3, then 8 after 1 2.
  ASSERT_EQ(trie.chains.size(), 3u);
  EXPECT_EQ(trie.chains[0].keys, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(trie.chains[1].keys, (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(trie.chains[1].depth, 3);
  EXPECT_EQ(trie.chains[2].keys, (std::vector<int32_t>{0, 1, 5}));
  ExpectEachFeedSeesItself(feeds, trie);
  EXPECT_EQ(CountTrieRows(feeds), 6);
}

TEST(PassTrieTest, LabelsBranchAfterTheWholePromptAndShareTheirCommonStart) {
  const std::vector<TrieFeed> feeds = {{{5, 6}, {{10, 11}, {10, 12}, {13}}}};
  const PassTrie trie = BuildPassTrie(feeds);
  EXPECT_EQ(trie.ids, (std::vector<int32_t>{5, 6, 10, 11, 12, 13}));
  EXPECT_EQ(trie.fed_tokens, 7);
  EXPECT_EQ(trie.shared_rows, 0);  // one feed: nothing is shared between sequences
  EXPECT_EQ(trie.label_rows[0][0], (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(trie.label_rows[0][1], (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(trie.label_rows[0][2], (std::vector<int64_t>{5}));
  ExpectEachFeedSeesItself(feeds, trie);
}

TEST(PassTrieTest, AFeedThatIsAnotherFeedsPrefixEndsInsideItsPath) {
  const std::vector<TrieFeed> feeds = {{{1, 2, 3, 4}, {}}, {{1, 2}, {{3}, {9}}}};
  const PassTrie trie = BuildPassTrie(feeds);
  EXPECT_EQ(trie.ids, (std::vector<int32_t>{1, 2, 3, 4, 9}));
  // The second feed's label 3 is the first feed's third prompt token.
  EXPECT_EQ(trie.label_rows[1][0], (std::vector<int64_t>{2}));
  EXPECT_EQ(trie.shared_rows, 3);
  ExpectEachFeedSeesItself(feeds, trie);
}

TEST(PassTrieTest, RandomFeedsHaveOneRowPerDistinctPrefix) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<TrieFeed> feeds(1 + rng() % 12);
    for (TrieFeed& feed : feeds) {
      // Few token values, so prefixes collide often.
      const size_t length = 1 + rng() % 9;
      for (size_t k = 0; k < length; ++k) feed.prompt.push_back(static_cast<int32_t>(rng() % 3));
      for (size_t j = rng() % 3; j > 0; --j) {
        feed.labels.emplace_back();
        for (size_t k = 1 + rng() % 3; k > 0; --k) {
          feed.labels.back().push_back(static_cast<int32_t>(rng() % 3));
        }
      }
    }
    std::set<std::vector<int32_t>> prefixes;
    std::map<std::vector<int32_t>, std::set<size_t>> holders;
    for (size_t f = 0; f < feeds.size(); ++f) {
      std::vector<int32_t> path;
      for (int32_t t : feeds[f].prompt) {
        path.push_back(t);
        prefixes.insert(path);
        holders[path].insert(f);
      }
      for (const std::vector<int32_t>& label : feeds[f].labels) {
        std::vector<int32_t> branch = feeds[f].prompt;
        for (int32_t t : label) {
          branch.push_back(t);
          prefixes.insert(branch);
          holders[branch].insert(f);
        }
      }
    }
    const PassTrie trie = BuildPassTrie(feeds);
    ASSERT_EQ(trie.ids.size(), prefixes.size()) << "round " << round;
    EXPECT_EQ(CountTrieRows(feeds), static_cast<int64_t>(prefixes.size()));
    int64_t shared = 0;
    for (const auto& [prefix, feeds_holding] : holders) shared += feeds_holding.size() > 1 ? 1 : 0;
    EXPECT_EQ(trie.shared_rows, shared);
    int64_t covered = 0;
    for (size_t c = 0; c < trie.chains.size(); ++c) {
      EXPECT_EQ(trie.chains[c].begin, covered);
      covered = trie.chains[c].end;
      EXPECT_EQ(static_cast<int64_t>(trie.chains[c].keys.size()),
                trie.chains[c].depth + trie.chains[c].end - trie.chains[c].begin);
    }
    EXPECT_EQ(covered, static_cast<int64_t>(trie.ids.size()));
    ExpectEachFeedSeesItself(feeds, trie);
  }
}

}  // namespace
}  // namespace nightshift::engine
