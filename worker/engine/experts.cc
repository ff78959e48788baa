#include "worker/engine/experts.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace nightshift::engine {
namespace {

const Weight& Get(const LayerWeights& weights, LayerWeight role) {
  return weights[static_cast<size_t>(role)];
}

at::Tensor OnDevice(const std::vector<int64_t>& values, const at::Device& device) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(device);
}

// The router's logits in float32: on a device too, where Linear would
// multiply BF16 weights in BF16 (a rounding must not flip a routing).
at::Tensor RouterLogits(const at::Tensor& x, const Weight& router) {
  if (router.device) return at::linear(x, WeightAs(router, at::kFloat));
  return Linear(x, router);
}

}  // namespace

SparseMlp::SparseMlp(const ModelConfig& c, const LayerWeights& w, const at::Tensor& hidden,
                     int64_t micro_batch_rows)
    : config_(c), micro_batch_rows_(std::max<int64_t>(1, micro_batch_rows)) {
  using W = LayerWeight;
  const int64_t tokens = hidden.size(0);
  const int64_t experts = c.moe.num_experts, k = c.moe.top_k;
  normed_ = at::empty_like(hidden);
  sum_ = at::zeros_like(hidden);
  at::Tensor top_weights = at::empty({tokens, k}, hidden.options());
  at::Tensor top_ids = at::empty({tokens, k}, hidden.options().dtype(at::kLong));
  const bool shared = c.moe.shared_expert_intermediate_size > 0;
  for (int64_t a = 0; a < tokens; a += micro_batch_rows_) {
    const int64_t m = std::min(micro_batch_rows_, tokens - a);
    at::Tensor x = normed_.narrow(0, a, m);
    x.copy_(Norm(hidden.narrow(0, a, m), c.norm, Get(w, W::kMlpNorm), Get(w, W::kMlpNormBias),
                 c.norm_eps));
    const at::Tensor probs = at::softmax(RouterLogits(x, Get(w, W::kRouter)), 1, at::kFloat);
    auto [values, ids] = at::topk(probs, k, 1);
    if (c.moe.norm_topk_prob) values = values / values.sum(1, /*keepdim=*/true);
    top_weights.narrow(0, a, m).copy_(values);
    top_ids.narrow(0, a, m).copy_(ids);
    if (shared) {
      at::Tensor out = GatedMlp(x, Get(w, W::kSharedGate), Get(w, W::kSharedUp),
                                Get(w, W::kSharedDown), c.activation);
      out.mul_(Sigmoid(Linear(x, Get(w, W::kSharedExpertGate))));
      sum_.narrow(0, a, m).copy_(out);
    }
  }
  const at::Tensor ids = top_ids.cpu();
  const at::Tensor weights = top_weights.to(at::kCPU, at::kFloat).contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  const float* weight = weights.data_ptr<float>();
  rows_.assign(static_cast<size_t>(experts), {});
  weights_.assign(static_cast<size_t>(experts), {});
  routed_.assign(static_cast<size_t>(experts), false);
  row_experts_.assign(static_cast<size_t>(tokens), {});
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = id[t * k + j];
      if (e < 0 || e >= experts) throw std::out_of_range("router chose expert out of range");
      rows_[static_cast<size_t>(e)].push_back(t);
      weights_[static_cast<size_t>(e)].push_back(weight[t * k + j]);
      routed_[static_cast<size_t>(e)] = true;
      row_experts_[static_cast<size_t>(t)].push_back(e);
    }
  }
}

std::vector<int64_t> SparseMlp::RoutedExperts() const {
  std::vector<int64_t> out;
  for (size_t e = 0; e < routed_.size(); ++e) {
    if (routed_[e]) out.push_back(static_cast<int64_t>(e));
  }
  return out;
}

void SparseMlp::RunExpert(int64_t expert, const ExpertWeights& w) {
  if (expert <= last_expert_) throw std::logic_error("experts must run in ascending order");
  last_expert_ = expert;
  const std::vector<int64_t>& rows = rows_.at(static_cast<size_t>(expert));
  const std::vector<float>& weights = weights_[static_cast<size_t>(expert)];
  const at::Device device = normed_.device();
  for (size_t a = 0; a < rows.size(); a += static_cast<size_t>(micro_batch_rows_)) {
    const size_t m = std::min(rows.size() - a, static_cast<size_t>(micro_batch_rows_));
    const at::Tensor index =
        OnDevice(std::vector<int64_t>(rows.begin() + a, rows.begin() + a + m), device);
    const at::Tensor scale =
        at::tensor(std::vector<float>(weights.begin() + a, weights.begin() + a + m),
                   at::TensorOptions().dtype(at::kFloat))
            .to(device)
            .unsqueeze(1);
    at::Tensor out =
        GatedMlp(normed_.index_select(0, index), w.gate, w.up, w.down, config_.activation);
    out.mul_(scale);
    sum_.index_add_(0, index, out);
  }
}

void SparseMlp::Finish(at::Tensor& hidden) {
  hidden.add_(sum_);
  normed_.reset();
  sum_.reset();
}

}  // namespace nightshift::engine
