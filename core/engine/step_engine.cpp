#include "engine/step_engine.h"

#include <chrono>
#include <deque>

namespace sy {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
}  // namespace

struct StepEngine::Seq {
  uint64_t id;
  size_t index;  // position in the caller's request list
  const GenerationRequest* req;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t computed = 0;         // tokens whose KV is in the cache
  Sampler sampler;
  GenerationResult result;
  bool done = false;
};

StepEngine::StepEngine(DecoderModel& model, PluginCacheManager& cache, StepEngineOptions options)
    : model_(model), cache_(cache), options_(options) {
  SY_CHECK(model_.paged_attention(), model_.path() << ": the step engine needs the attention-fusion pass to have fused "
                                                      "every layer's attention");
  SY_CHECK(options_.max_batch_tokens > 0 && options_.max_seqs > 0, "step engine: max_batch_tokens and max_seqs must be positive");
  for (int l = 0; l < model_.num_layers(); ++l) {
    auto [k, v] = cache_.storage(l);
    SY_CHECK(k.rank == 4 && v.rank == 4 && k.data && v.data && k.dims[1] == model_.kv_heads() && k.dims[3] == model_.head_dim(),
             "cache manager storage for layer " << l << " does not match the model ([blocks, " << model_.kv_heads() << ", block, "
                                                << model_.head_dim() << "] expected)");
    key_cache_.push_back(k);
    value_cache_.push_back(v);
  }
  block_size_ = static_cast<int32_t>(key_cache_[0].dims[2]);
  metrics_.total_blocks = cache_.stats().total_blocks;
}

StepEngine::~StepEngine() = default;

void StepEngine::validate(const GenerationRequest& r) const {
  SY_CHECK(!r.prompt.empty(), "the prompt is empty");
  SY_CHECK(static_cast<int64_t>(r.prompt.size()) <= model_.max_context(),
           "the prompt has " << r.prompt.size() << " tokens, over the context limit of " << model_.max_context());
  SY_CHECK(r.max_tokens >= 0, "max_tokens must be >= 0, got " << r.max_tokens);
  for (int t : r.prompt)
    SY_CHECK(t >= 0 && (model_.vocab_size() < 0 || t < model_.vocab_size()),
             "prompt token id " << t << " is outside the vocabulary (0.." << model_.vocab_size() - 1 << ")");
}

Tensor StepEngine::forward(const std::vector<Scheduled>& batch) {
  int32_t T = 0;
  for (const auto& b : batch) T += b.tokens;
  Tensor ids = Tensor::empty(DType::I64, Shape{1, T});
  Tensor pos = Tensor::empty(DType::I64, Shape{1, T});
  std::vector<int32_t> query_start{0}, context_len;
  std::vector<uint64_t> seq_ids;
  std::vector<std::vector<int32_t>> tables;
  int32_t max_blocks = 1;
  int32_t t = 0;
  for (const auto& b : batch) {
    for (int32_t j = 0; j < b.tokens; ++j, ++t) {
      int32_t p = b.seq->computed + j;
      ids.data<int64_t>()[t] = b.seq->tokens[static_cast<size_t>(p)];
      pos.data<int64_t>()[t] = p;
    }
    query_start.push_back(t);
    context_len.push_back(b.seq->computed + b.tokens);
    seq_ids.push_back(b.seq->id);
    tables.push_back(cache_.block_table(b.seq->id));
    max_blocks = std::max(max_blocks, static_cast<int32_t>(tables.back().size()));
  }
  // Paging waste: slots held in blocks minus tokens stored (windowed-out
  // blocks, marked -1, hold nothing).
  int64_t waste_sum = 0;
  bool any_prefill = false, any_decode = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t held = 0, first_kept = -1;
    for (size_t k = 0; k < tables[i].size(); ++k)
      if (tables[i][k] >= 0) {
        ++held;
        if (first_kept < 0) first_kept = static_cast<int64_t>(k);
      }
    int64_t stored = context_len[i] - std::max<int64_t>(first_kept, 0) * block_size_;
    int64_t waste = held * block_size_ - stored;
    waste_sum += waste;
    metrics_.max_waste_tokens = std::max(metrics_.max_waste_tokens, waste);
    (batch[i].tokens > 1 || batch[i].seq->computed + batch[i].tokens < static_cast<int32_t>(batch[i].seq->tokens.size()) ? any_prefill : any_decode) = true;
  }
  metrics_.max_mean_waste_tokens = std::max(metrics_.max_mean_waste_tokens, static_cast<double>(waste_sum) / static_cast<double>(batch.size()));
  metrics_.mixed_steps += any_prefill && any_decode;
  std::vector<int32_t> flat(static_cast<size_t>(max_blocks) * batch.size(), 0);
  for (size_t i = 0; i < tables.size(); ++i) std::copy(tables[i].begin(), tables[i].end(), flat.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(max_blocks)));
  std::vector<int64_t> positions(pos.data<int64_t>(), pos.data<int64_t>() + T);

  sy_step_context step{};
  step.struct_size = sizeof(step);
  step.num_seqs = static_cast<int32_t>(batch.size());
  step.num_tokens = T;
  step.query_start = query_start.data();
  step.context_len = context_len.data();
  step.positions = positions.data();
  step.seq_ids = seq_ids.data();
  step.block_tables = flat.data();
  step.max_blocks_per_seq = max_blocks;
  step.block_size = block_size_;
  step.num_layers = static_cast<int32_t>(key_cache_.size());
  step.key_cache = key_cache_.data();
  step.value_cache = value_cache_.data();

  Executor& ex = model_.executor();
  std::vector<Tensor> inputs(ex.graph().inputs.size());
  inputs[static_cast<size_t>(model_.input_ids)] = ids;
  if (model_.position_ids >= 0 && ex.input_used(static_cast<size_t>(model_.position_ids)))
    inputs[static_cast<size_t>(model_.position_ids)] = pos;
  std::vector<Tensor> out = ex.run(inputs, &step);
  ++metrics_.steps;
  metrics_.computed_tokens += T;
  Tensor logits = out[static_cast<size_t>(model_.logits)];
  SY_CHECK(logits.rank() == 3 && logits.dim(0) == 1 && logits.dim(1) == T,
           "logits have shape " << logits.shape().str() << ", expected [1, " << T << ", vocab]");
  return logits;
}

std::vector<GenerationResult> StepEngine::generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token) {
  auto t0 = Clock::now();
  for (const auto& r : requests) validate(r);
  std::vector<std::unique_ptr<Seq>> seqs;
  std::deque<Seq*> waiting;
  std::vector<Seq*> running;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto s = std::make_unique<Seq>(Seq{next_id_++, i, &requests[i], {}, 0, Sampler(requests[i].sampling), {}, false});
    s->tokens.assign(requests[i].prompt.begin(), requests[i].prompt.end());
    metrics_.prompt_tokens += static_cast<int64_t>(s->tokens.size());
    if (requests[i].max_tokens == 0) {
      s->done = true;
      s->result.finish_reason = "length";
    } else {
      waiting.push_back(s.get());
    }
    seqs.push_back(std::move(s));
  }
  // Frees a sequence's cache and sends it back to the queue, to be
  // recomputed (prompt and generated tokens) when there is room again.
  auto preempt = [&](Seq* s) {
    cache_.release(s->id);
    s->computed = 0;
    running.erase(std::find(running.begin(), running.end(), s));
    waiting.push_front(s);
    ++metrics_.preemptions;
  };
  auto finish = [&](Seq* s, const char* reason) {
    s->done = true;
    s->result.finish_reason = reason;
    cache_.release(s->id);
    running.erase(std::find(running.begin(), running.end(), s));
  };

  while (!waiting.empty() || !running.empty()) {
    std::vector<Scheduled> batch;
    int32_t budget = options_.max_batch_tokens;
    // Running sequences first (decode, or the next chunk of their prompt).
    for (size_t i = 0; i < running.size() && budget > 0;) {
      Seq* s = running[i];
      int32_t n = std::min(budget, static_cast<int32_t>(s->tokens.size()) - s->computed);
      if (cache_.allocate(s->id, n)) {
        batch.push_back({s, n});
        budget -= n;
        ++i;
        continue;
      }
      // Cache full: preempt the newest running sequence (maybe this one).
      Seq* victim = running.back();
      std::erase_if(batch, [&](const Scheduled& b) { return b.seq == victim; });
      preempt(victim);
      if (victim == s) continue;  // i now points at the next sequence
    }
    // Then admit waiting sequences, oldest first.
    while (!waiting.empty() && budget > 0 && static_cast<int>(running.size()) < options_.max_seqs) {
      Seq* s = waiting.front();
      int32_t cached = cache_.match_prefix(s->id, s->tokens);
      int32_t n = std::min(budget, static_cast<int32_t>(s->tokens.size()) - cached);
      if (!cache_.allocate(s->id, n)) {
        if (cached > 0) cache_.release(s->id);  // give back the matched prefix blocks
        break;
      }
      if (s->result.tokens.empty()) {
        s->result.cached_tokens = cached;
        metrics_.cached_tokens += cached;
      }
      s->computed = cached;
      waiting.pop_front();
      running.push_back(s);
      batch.push_back({s, n});
      budget -= n;
    }
    if (batch.empty()) {
      Seq* s = waiting.front();
      SY_THROW("request " << s->index << " (" << s->tokens.size() << " tokens) does not fit the KV cache even alone ("
                          << cache_.stats().total_blocks << " blocks of " << block_size_ << " tokens)");
    }
    auto stats = cache_.stats();
    metrics_.peak_used_blocks = std::max(metrics_.peak_used_blocks, stats.total_blocks - stats.free_blocks);

    Tensor logits = forward(batch);
    double now = ms_since(t0);
    const int64_t V = logits.dim(2);
    int32_t row = 0;
    for (const auto& b : batch) {
      Seq* s = b.seq;
      row += b.tokens;
      s->computed += b.tokens;
      cache_.commit(s->id, s->tokens.data(), s->computed);
      if (s->computed < static_cast<int32_t>(s->tokens.size())) continue;  // more prompt chunks to go
      int tok = s->sampler.sample(logits.data<float>() + static_cast<int64_t>(row - 1) * V, static_cast<int>(V));
      GenerationResult& res = s->result;
      if (res.tokens.empty()) res.ttft_ms = now;
      res.tokens.push_back(tok);
      res.e2e_ms = now;
      s->tokens.push_back(tok);
      if (on_token) on_token(s->index, tok);
      if (s->req->stop_at_eos && tok == s->req->eos_id) finish(s, "stop");
      else if (static_cast<int>(res.tokens.size()) >= s->req->max_tokens) finish(s, "length");
      else if (static_cast<int64_t>(s->tokens.size()) >= model_.max_context()) finish(s, "context");
    }
  }
  std::vector<GenerationResult> out;
  for (auto& s : seqs) out.push_back(std::move(s->result));
  return out;
}

Tensor StepEngine::prompt_logits(const std::vector<int>& prompt) {
  GenerationRequest r;
  r.prompt = prompt;
  validate(r);
  Seq s{next_id_++, 0, &r, std::vector<int32_t>(prompt.begin(), prompt.end()), 0, Sampler(r.sampling), {}, false};
  // One forward over the whole prompt, without the prefix cache, so every
  // position is computed.
  SY_CHECK(cache_.allocate(s.id, static_cast<int32_t>(prompt.size())), "the prompt does not fit the KV cache");
  Tensor logits;
  try {
    logits = forward({{&s, static_cast<int32_t>(prompt.size())}});
  } catch (...) {
    cache_.release(s.id);
    throw;
  }
  cache_.release(s.id);
  return logits.reshaped(Shape{logits.dim(1), logits.dim(2)});
}

std::vector<float> StepEngine::last_logits(const std::vector<int>& prompt) {
  Tensor logits = prompt_logits(prompt);
  const int64_t V = logits.dim(1);
  const float* row = logits.data<float>() + (logits.dim(0) - 1) * V;
  return std::vector<float>(row, row + V);
}

}  // namespace sy
