//===- Speculative.h - Drafts and the adaptive draft length -----*- C++ -*-===//
//
// kiln-run's speculative decoding (docs/speculative.md): the model-free
// drafts and the adaptive draft length of the runtime (spec/Drafts.h, which
// the serving engine runs per request), and the draft-model drafter over a
// second artifact (a separate draft model or the target's self-draft).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TOOLS_COMMON_SPECULATIVE_H
#define KILN_TOOLS_COMMON_SPECULATIVE_H

#include "kiln_rt/api.h"
#include "spec/Drafts.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::tool {

using kiln::rt::spec::DraftController;
using kiln::rt::spec::ngramDraft;
using kiln::rt::spec::SuffixIndex;

/// A draft model: a second artifact with the target's vocabulary (a
/// separate small model, `--speculative=draft:ART`, or the target's self-draft compiled
/// from the same checkpoint with a cheaper recipe) run on its own session.
/// Each draft decodes k tokens autoregressively after catching its KV cache
/// up with the accepted tokens (rolling back its own rejected ones); with
/// sampling on, the draft tokens are drawn from q, the draft model's
/// distribution under the same temperature / top-k / top-p, and q's rows
/// are kept for the speculative-sampling rule (kiln_rt_sampler_verify_q).
class DraftModel {
public:
  ~DraftModel();
  /// Loads the artifact at `path` and checks it against the target: the
  /// same vocabulary size, every token's text equal (kiln_rt_detokenize),
  /// and the same BOS / EOS ids. Returns "" or an error message naming
  /// `path` and the first difference.
  std::string open(const std::string &path, kiln_rt_artifact_t *target,
                   const kiln_rt_sampler_params_t &sampling, bool verify);
  /// Draft of k tokens after `history` (the prompt and every accepted
  /// token): greedy or sampled from q. With sampling, `qRows` receives k
  /// rows of q (float32[k, vocab]). Fewer tokens when the draft's context
  /// is full.
  kiln_rt_status_t draft(const std::vector<int32_t> &history, int64_t k,
                         std::vector<int32_t> &tokens,
                         std::vector<float> *qRows);
  /// Milliseconds of one draft decode step (best of 3 after a warm-up,
  /// each rolled back); for the controller's C(k). 0 when it cannot be
  /// timed (the context is full, or a step fails).
  double stepCostMs(const std::vector<int32_t> &history);

private:
  kiln_rt_status_t catchUp(const std::vector<int32_t> &history);
  kiln_rt_artifact_t *artifact_ = nullptr;
  kiln_rt_session_t *session_ = nullptr;
  kiln_rt_sampler_t *sampler_ = nullptr;
  /// Tokens the draft session's KV cache holds, in order.
  std::vector<int32_t> cached_;
  std::vector<float> logits_;
  int64_t vocab_ = 0, ctx_ = 0;
  bool greedy_ = true;
};

} // namespace kiln::tool

#endif // KILN_TOOLS_COMMON_SPECULATIVE_H
