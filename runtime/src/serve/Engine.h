//===- Engine.h - Serving engine: batched steps over a paged cache -*- C++ -*-===//
//
// The engine behind api.h's kiln_rt_engine_*: one thread that loops
//   Scheduler::schedule -> copy-on-write copies -> the step's kiln_batch and
//   token ids -> model.so's kiln_step -> sample each sampling sequence's
//   logits row -> Scheduler::complete -> callbacks,
// over a paged KV pool it allocates (kv::BlockManager keeps the block
// tables). Requests come from any thread (submit / cancel, under a mutex)
// and are handed to the scheduler between steps, so a cancellation frees
// its blocks before the next step runs.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SERVE_ENGINE_H
#define KILN_RUNTIME_SERVE_ENGINE_H

#include "base/Status.h"
#include "kiln_rt/api.h"
#include "kiln_rt/kernel_abi.h"
#include "kv/BlockManager.h"
#include "cuda/CudaBackend.h"
#include "serve/CpuStepper.h"
#include "serve/Scheduler.h"
#include "spec/Drafts.h"
#include "tokenizer/Sampler.h"

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kiln::rt {
class Artifact;
}

namespace kiln::rt::serve {

/// Bytes of one KV block of all layers: keys and values of `blockTokens`
/// positions, `kvHeads * headDim` elements of `elemBytes` each, plus an
/// f32 scale per kv head and position for 8-bit caches.
int64_t kvBlockBytes(int64_t layers, int64_t kvHeads, int64_t headDim,
                     int64_t elemBytes, bool quantized, int64_t blockTokens);

class Engine {
public:
  /// Validates `options` against `artifact` (see api.h kiln_rt_engine_create
  /// for the errors), allocates the pool and starts the engine thread.
  static Status create(const Artifact &artifact,
                       const kiln_rt_engine_options_t &options,
                       std::unique_ptr<Engine> &out);
  /// Cancels every request (their callbacks run) and joins the thread.
  ~Engine();

  Status submit(const int32_t *prompt, int64_t n,
                const kiln_rt_request_params_t &params,
                kiln_rt_engine_callback_fn callback, void *user,
                uint64_t &outId,
                const kiln_rt_speculative_params_t &spec = {});
  kiln_rt_speculative_stats_t speculativeStats();
  void cancel(uint64_t id);
  kiln_rt_engine_stats_t stats();
  /// The error of request `id` if it finished with KILN_RT_FINISH_ERROR
  /// (the last kMaxErrors such requests are remembered), else ok.
  Status requestError(uint64_t id);

private:
  Engine(const Artifact &artifact) : artifact_(artifact) {}
  struct Pending {
    Request request;
    kiln_rt_sampler_params_t sampling;
    kiln_rt_engine_callback_fn callback;
    void *user;
    kiln_rt_speculative_params_t spec{};
  };
  struct Live {
    std::unique_ptr<Sampler> sampler;
    kiln_rt_engine_callback_fn callback;
    void *user;
    int64_t promptLen = 0;
    // Speculative decoding (kiln_rt_engine_submit_speculative).
    kiln_rt_speculative_params_t spec{};
    spec::DraftController controller;
    std::unique_ptr<spec::SuffixIndex> suffix; ///< mode SUFFIX
    int64_t suffixFed = 0; ///< tokens of the sequence the index holds
    std::vector<int32_t> proposed; ///< this step's whole draft (evidence)
  };
  /// Chooses and hands the scheduler this step's drafts.
  void proposeDrafts();
  /// The step-time model the drafts are priced with: ms = a + b * rows,
  /// a decayed least-squares fit over the steps of at most 64 rows.
  void observeStep(int64_t rows, double ms);
  double predictStepMs(int64_t rows) const;
  double fitN_ = 0, fitX_ = 0, fitY_ = 0, fitXX_ = 0, fitXY_ = 0;

  void run();
  /// One model step over `plan`: the sampled token of every chunk that
  /// samples, in order, in `sampled`, and its log probability in
  /// `logprobs`. A sampling row with a NaN or infinite logit (corrupted
  /// weights, an overflow) is not sampled: its request id and message go to
  /// `bad`.
  Status step(const StepPlan &plan, std::vector<int32_t> &sampled,
              std::vector<float> &logprobs,
              std::vector<std::pair<uint64_t, std::string>> &bad);
  void finish(uint64_t id, kiln_rt_finish_reason_t reason);

  const Artifact &artifact_;
  kiln_rt_engine_options_t options_{};
  int64_t context_ = 0, vocab_ = 0, blockTokens_ = 16;
  /// Micro-batches per step with pipeline stages (0: one per stage).
  int32_t microBatches_ = 0;
  int64_t layers_ = 0, kvHeads_ = 0, headDim_ = 0;
  bool batchInvariant_ = false; ///< holds acquireBatchInvariantKernels
  /// CUDA artifacts: the device pool, arena and kiln_step (null on cpu).
  std::unique_ptr<CudaStepper> cudaStepper_;
  /// cpu artifacts: the host pool, arena and kiln_step (null on cuda).
  std::unique_ptr<CpuStepper> cpuStepper_;
  std::vector<int32_t> copySrc_, copyDst_; ///< the step's copy-on-write
  int64_t numBlocks_ = 0;
  /// Rank 0 of a tensor-parallel group: the followers' name for this engine.
  uint32_t groupId_ = 0;

  // Step buffers (engine thread only).
  std::vector<float> logits_;
  std::vector<int32_t> logitCount_; ///< the step's logit rows per sequence
  /// Per sampling chunk of the step: its draft tokens kept (speculative).
  std::vector<std::vector<int32_t>> accepted_;
  std::vector<std::vector<float>> acceptedLogprobs_;
  kiln_rt_speculative_stats_t specStats_{}; ///< under mu_
  std::vector<float> logRow_; ///< a sampled row's raw logits (logprobs)
  std::vector<int32_t> tokens_, rowStart_, rowCount_, pos_, tables_,
      positions_;

  std::unique_ptr<kv::BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<uint64_t, Live> live_; ///< engine thread only

  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Pending> incoming_;  ///< under mu_
  std::vector<uint64_t> cancels_;  ///< under mu_
  bool stopping_ = false, failed_ = false; ///< under mu_
  uint64_t nextId_ = 1;            ///< under mu_
  int64_t queued_ = 0;             ///< under mu_: incoming + waiting
  kiln_rt_engine_stats_t stats_{}; ///< under mu_, refreshed after each step
  static constexpr size_t kMaxErrors = 256;
  std::map<uint64_t, std::string> errors_; ///< under mu_: failed requests
  std::thread thread_;
};

} // namespace kiln::rt::serve

#endif // KILN_RUNTIME_SERVE_ENGINE_H
