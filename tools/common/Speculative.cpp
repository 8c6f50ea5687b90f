//===- Speculative.cpp - Drafts and the adaptive draft length ------------===//
//
// Speculative.h: the draft model (the model-free drafts are the runtime's,
// spec/Drafts.cpp).
//
//===----------------------------------------------------------------------===//
#include "tools/common/Speculative.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kiln::tool {

//===----------------------------------------------------------------------===//
// DraftModel
//===----------------------------------------------------------------------===//

namespace {
std::string takeMessage(kiln_rt_status_t status) {
  std::string m = kiln_rt_status_message(status);
  kiln_rt_status_free(status);
  return m;
}
double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch())
      .count();
}
} // namespace

DraftModel::~DraftModel() {
  kiln_rt_sampler_release(sampler_);
  kiln_rt_session_release(session_);
  kiln_rt_artifact_release(artifact_);
}

std::string DraftModel::open(const std::string &path,
                             kiln_rt_artifact_t *target,
                             const kiln_rt_sampler_params_t &sampling,
                             bool verify) {
  kiln_rt_open_options_t options{};
  options.flags = verify ? 0u : uint32_t(KILN_RT_OPEN_SKIP_CHECKSUMS);
  if (kiln_rt_status_t s =
          kiln_rt_artifact_open_with_options(path.c_str(), &options, &artifact_))
    return "draft artifact: " + takeMessage(s);
  kiln_rt_model_info_t mine{}, theirs{};
  kiln_rt_artifact_info(artifact_, &mine);
  kiln_rt_artifact_info(target, &theirs);
  if (std::strcmp(mine.target, "cpu") != 0)
    return "draft artifact " + path + ": target '" + mine.target +
           "', expected cpu (the session runs the draft on the host)";
  if (mine.vocab_size != theirs.vocab_size)
    return "draft artifact " + path + " has a vocabulary of " +
           std::to_string(mine.vocab_size) + " tokens, the model " +
           std::to_string(theirs.vocab_size) +
           ": a draft must use the same tokenizer";
  if (mine.bos_id != theirs.bos_id || mine.eos_id != theirs.eos_id)
    return "draft artifact " + path + " has BOS/EOS ids " +
           std::to_string(mine.bos_id) + "/" + std::to_string(mine.eos_id) +
           ", the model " + std::to_string(theirs.bos_id) + "/" +
           std::to_string(theirs.eos_id) +
           ": a draft must use the same tokenizer";
  // Every token's text, decoded after a plain token (no BOS space rule).
  for (int64_t id = 0; id < mine.vocab_size; ++id) {
    const char *a = nullptr, *b = nullptr;
    size_t la = 0, lb = 0;
    if (kiln_rt_status_t s =
            kiln_rt_detokenize(artifact_, -1, int32_t(id), &a, &la))
      return "draft artifact " + path + ": " + takeMessage(s);
    std::string pa(a, la);
    if (kiln_rt_status_t s = kiln_rt_detokenize(target, -1, int32_t(id), &b, &lb))
      return "draft check: " + takeMessage(s);
    if (pa != std::string(b, lb))
      return "draft artifact " + path + ": token " + std::to_string(id) +
             " is '" + pa + "', the model's '" + std::string(b, lb) +
             "': a draft must use the same tokenizer";
  }
  vocab_ = mine.vocab_size;
  ctx_ = std::min(mine.max_seq_len, theirs.max_seq_len);
  if (kiln_rt_status_t s = kiln_rt_session_create(artifact_, &session_))
    return "draft artifact " + path + ": " + takeMessage(s);
  kiln_rt_sampler_params_t params = sampling;
  params.seed = sampling.seed ^ 0x9e3779b97f4a7c15ull; // its own stream
  if (params.seed == 0)
    params.seed = 1;
  if (kiln_rt_status_t s = kiln_rt_sampler_create(&params, vocab_, &sampler_))
    return "draft sampler: " + takeMessage(s);
  greedy_ = sampling.temperature == 0.0f;
  logits_.resize(size_t(vocab_));
  return "";
}

kiln_rt_status_t DraftModel::catchUp(const std::vector<int32_t> &history) {
  // Keep the longest common prefix of what the cache holds and the
  // history (the draft's own rejected tokens are forgotten).
  size_t common = 0;
  while (common < cached_.size() && common < history.size() &&
         cached_[common] == history[common])
    ++common;
  if (common < cached_.size()) {
    if (kiln_rt_status_t s = kiln_rt_session_rollback(session_, int64_t(common)))
      return s;
    cached_.resize(common);
  }
  // The draft's last logits must be those after the whole history: feed at
  // least the last token again when nothing is missing.
  if (common == history.size() && common > 0) {
    if (kiln_rt_status_t s =
            kiln_rt_session_rollback(session_, int64_t(common - 1)))
      return s;
    cached_.resize(common - 1);
    common -= 1;
  }
  const int64_t missing = int64_t(history.size() - common);
  if (missing == 1) {
    if (kiln_rt_status_t s = kiln_rt_session_decode(session_, history.back()))
      return s;
  } else if (missing > 1) {
    if (kiln_rt_status_t s = kiln_rt_session_prefill(
            session_, history.data() + common, missing))
      return s;
  }
  cached_ = history;
  return nullptr;
}

kiln_rt_status_t DraftModel::draft(const std::vector<int32_t> &history,
                                   int64_t k, std::vector<int32_t> &tokens,
                                   std::vector<float> *qRows) {
  tokens.clear();
  if (qRows)
    qRows->clear();
  if (k <= 0 || history.empty() || int64_t(history.size()) >= ctx_)
    return nullptr;
  if (kiln_rt_status_t s = catchUp(history))
    return s;
  for (int64_t i = 0; i < k; ++i) {
    std::memcpy(logits_.data(), kiln_rt_session_logits(session_),
                sizeof(float) * size_t(vocab_));
    int32_t t;
    if (greedy_ || !qRows) {
      t = kiln_rt_sampler_sample(sampler_, logits_.data());
    } else {
      const size_t at = qRows->size();
      qRows->resize(at + size_t(vocab_));
      t = kiln_rt_sampler_draft(sampler_, logits_.data(), qRows->data() + at);
    }
    tokens.push_back(t);
    // The last draft token is verified by the target; the draft needs its
    // KV row only when it drafts further.
    if (i + 1 == k || int64_t(cached_.size()) + 1 >= ctx_)
      break;
    if (kiln_rt_status_t s = kiln_rt_session_decode(session_, t))
      return s;
    cached_.push_back(t);
  }
  return nullptr;
}

double DraftModel::stepCostMs(const std::vector<int32_t> &history) {
  if (history.empty() || int64_t(history.size()) + 2 >= ctx_ ||
      catchUp(history) != nullptr)
    return 0.0;
  const int64_t base = int64_t(cached_.size());
  double best = 1e300;
  for (int rep = 0; rep < 4; ++rep) {
    const double t0 = nowMs();
    kiln_rt_status_t s = kiln_rt_session_decode(session_, history.back());
    const double ms = nowMs() - t0;
    if (s) {
      kiln_rt_status_free(s);
      return 0.0;
    }
    if (rep > 0) // the first is a warm-up
      best = std::min(best, ms);
    if (kiln_rt_status_t r = kiln_rt_session_rollback(session_, base)) {
      kiln_rt_status_free(r);
      return 0.0;
    }
  }
  return best;
}

} // namespace kiln::tool
