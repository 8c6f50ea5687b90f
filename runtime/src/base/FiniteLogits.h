//===- FiniteLogits.h - refuse NaN / infinite logits ------------*- C++ -*-===//
//
// A NaN or infinite logit means corrupted weights (checksums skipped) or an
// overflow; sampling from the row would print garbage silently. The session
// and the serving engine both scan their host logits with this.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RT_BASE_FINITELOGITS_H
#define KILN_RT_BASE_FINITELOGITS_H

#include "base/Status.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace kiln::rt {

/// ok if logits[0, vocab) are all finite; otherwise KILN_RT_DATA_LOSS
/// "<prefix>logit I is NaN|infinite after position P: the weights are
/// corrupted or the activations overflowed" for the first bad logit I.
inline Status checkFiniteLogits(const float *logits, int64_t vocab,
                                int64_t position,
                                const std::string &prefix = "") {
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isfinite(logits[i]))
      continue;
    return dataLoss(prefix + "logit " + std::to_string(i) + " is " +
                    (std::isnan(logits[i]) ? "NaN" : "infinite") +
                    " after position " + std::to_string(position) +
                    ": the weights are corrupted or the activations "
                    "overflowed");
  }
  return Status::ok();
}

} // namespace kiln::rt

#endif // KILN_RT_BASE_FINITELOGITS_H
