//===- KilnRun.cpp - Run a Kiln artifact --------------------------*- C++ -*-===//
//
// kiln-run ARTIFACT [--prompt TEXT | --prompt-file FILE|-] [--max-tokens N]
//          [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ctx N]
// kiln-run ARTIFACT --chat [--system TEXT] [--chat-template FILE] [...]
//
// Prints the prompt as typed followed by the generated text on stdout (each
// piece decoded after its predecessor and flushed, a final newline), and
// TTFT / decode throughput on stderr. --chat renders the conversation with
// the model's chat template (runtime/src/chat) one user turn per line of
// stdin ("> " prompts on a terminal), keeping the KV cache across turns. Test hooks: --tokens,
// --dump-logits, --print-tokens (see --help). Errors: "kiln-run: error: ..."
// on stderr and exit status 1.
//
//===----------------------------------------------------------------------===//
#include "base/RegularFile.h"
#include "chat/ChatTemplate.h"
#include "kiln_rt/api.h"
#include "codegen/Artifact/SafeOutput.h"
#include "tools/common/Speculative.h"
#include "tools/common/Threads.h"
#include "tools/common/ToolSupport.h"
#include "tools/common/Trace.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>
#include <string>
#include <vector>

namespace cl = llvm::cl;

static cl::OptionCategory runCategory("kiln-run options");

static cl::opt<std::string> artifactDir(cl::Positional, cl::Required,
                                        cl::desc("<artifact directory>"),
                                        cl::cat(runCategory));
static cl::opt<std::string> prompt("prompt", cl::desc("Prompt text (default: BOS only)"),
                                   cl::value_desc("text"), cl::init(""),
                                   cl::cat(runCategory));
static cl::opt<std::string> promptFile(
    "prompt-file",
    cl::desc("Read the prompt from FILE ('-': standard input), as typed "
             "(a final newline is kept); not with --prompt"),
    cl::value_desc("FILE"), cl::cat(runCategory));
static cl::opt<int64_t> ctxSize(
    "ctx",
    cl::desc("Context length in tokens for this run, at most the compiled "
             "maximum (default: the compiled maximum); the KV cache pages of "
             "positions beyond it are never touched"),
    cl::value_desc("N"), cl::init(0), cl::cat(runCategory));
static cl::opt<bool> chatMode(
    "chat",
    cl::desc("Chat with an instruct model: one user turn per line of standard "
             "input ('> ' prompts on a terminal), rendered with the model's "
             "chat template; each answer ends at the end-of-turn token"),
    cl::cat(runCategory));
static cl::opt<std::string> systemPrompt(
    "system", cl::desc("--chat: a system message first in the conversation"),
    cl::value_desc("TEXT"), cl::cat(runCategory));
static cl::opt<std::string> chatTemplateFile(
    "chat-template",
    cl::desc("--chat: render with this Jinja2 chat template instead of the "
             "artifact's"),
    cl::value_desc("FILE"), cl::cat(runCategory));
static cl::opt<bool> verbosePrompt(
    "verbose-prompt",
    cl::desc("--chat: print each rendered addition to the conversation on "
             "stderr before it is run"),
    cl::cat(runCategory));
static cl::opt<int64_t> maxTokens("max-tokens",
                                  cl::desc("Most tokens to generate (default 256); "
                                           "generation also stops at EOS/BOS and at "
                                           "the end of the model's context"),
                                  cl::value_desc("N"), cl::init(256),
                                  cl::cat(runCategory));
static cl::opt<float> temperature("temperature",
                                  cl::desc("Sampling temperature, 0 = greedy (default 1.0)"),
                                  cl::value_desc("T"), cl::init(1.0f),
                                  cl::cat(runCategory));
static cl::opt<int> topK("top-k", cl::desc("Top-k sampling, 0 = off (default 0)"),
                         cl::value_desc("K"), cl::init(0), cl::cat(runCategory));
static cl::opt<float> topP("top-p",
                           cl::desc("Top-p (nucleus) sampling: keep the smallest set of tokens whose probability exceeds P; 0 or 1 = off, as in llama2.c (default 0.9)"),
                           cl::value_desc("P"), cl::init(0.9f), cl::cat(runCategory));
static cl::opt<uint64_t> seed("seed", cl::desc("Random seed (default: current time)"),
                              cl::value_desc("S"), cl::cat(runCategory));
static cl::opt<bool> noVerify("no-verify",
                              cl::desc("Skip XXH3 checksums of artifact files "
                                       "(sizes are still checked)"),
                              cl::cat(runCategory));
static cl::opt<std::string> trustedKeys(
    "trusted-keys",
    cl::desc("Require the artifact to be signed (manifest.sig) by one of the "
             "Ed25519 public keys in DIR (its *.pub files, or one key file); "
             "checked with every file's BLAKE2b-256 before model.so is "
             "loaded (docs/security.md)"),
    cl::value_desc("DIR"), cl::cat(runCategory));
static cl::opt<std::string> tokenList(
    "tokens",
    cl::desc("Test hook: comma-separated token ids used instead of --prompt "
             "(e.g. --tokens=1,403,407); with --dump-logits nothing is generated"),
    cl::value_desc("ids"), cl::init(""), cl::cat(runCategory));
static cl::opt<std::string> dumpLogits(
    "dump-logits",
    cl::desc("Test hook: prefill the first k = (n+1)/2 prompt tokens, decode the "
             "rest one by one, and write the logits after each step (positions "
             "k-1 .. n-1, n-k+1 rows of vocab_size little-endian float32) to PATH"),
    cl::value_desc("PATH"), cl::init(""), cl::cat(runCategory));
static cl::opt<bool> printTokens(
    "print-tokens",
    cl::desc("Test hook: print the generated token ids on stderr (one line)"),
    cl::cat(runCategory));

static cl::opt<bool> noSpecial(
    "no-special",
    cl::desc("Treat special (control) tokens written in the prompt, such as "
             "<|im_start|>, as plain text instead of their ids"),
    cl::cat(runCategory));
static cl::opt<bool> printPromptTokens(
    "print-prompt-tokens",
    cl::desc("Test hook: print the prompt's token ids on stderr (one line, "
             "\"prompt: ...\") before generating"),
    cl::cat(runCategory));

static cl::opt<std::string> traceFile(
    "trace",
    cl::desc("Write a Chrome trace-event JSON file (Perfetto, "
             "chrome://tracing) of the run: prefill/decode steps, every "
             "kernel call with its op kind, IR location, bytes and FLOPs, "
             "and sampling/detokenizing; written when the run ends"),
    cl::value_desc("FILE.json"), cl::cat(runCategory));
static cl::opt<bool> noEngine(
    "no-engine",
    cl::desc("Generate on the single-sequence session (contiguous KV cache) "
             "instead of the serving engine (paged KV cache, the batched "
             "step kiln-serve runs); the session is used anyway for --chat, "
             "--trace, --dump-logits, artifacts without a step entry point, "
             "and runs that would fill the context"),
    cl::cat(runCategory));

static cl::opt<std::string> speculativeMode(
    "speculative",
    cl::desc("Speculative decoding (docs/speculative.md): drafts of up to "
             "--draft-max tokens, scored with the last token in one call of "
             "the artifact's verify step (kiln-compile --speculative); the "
             "draft tokens the model accepts are kept (greedy: its argmax; "
             "sampling: the speculative-sampling rule, same output "
             "distribution) and the rest rolled back. ngram: prompt lookup "
             "(the continuation of the latest earlier occurrence of the last "
             "3, 2 or 1 tokens); suffix: the most frequent continuation of "
             "the longest earlier-occurring suffix (SuffixDecoding); self: "
             "the artifact's self-draft (kiln-compile --self-draft); "
             "draft:ART: a draft model artifact with the same tokenizer. On "
             "the session"),
    cl::value_desc("ngram|suffix|self|draft:ART"), cl::cat(runCategory));
static cl::opt<int64_t> draftMax(
    "draft-max",
    cl::desc("Most draft tokens per verify step with --speculative, 1 to "
             "32 (default 5)"),
    cl::init(5), cl::value_desc("K"), cl::cat(runCategory));

static cl::opt<bool> draftAdaptive(
    "draft-adaptive",
    cl::desc("With --speculative: choose each step's draft length k in [0, "
             "--draft-max] that maximises expected tokens per second, from "
             "the decayed acceptance rate and the step costs measured at "
             "start (k = 0: a plain decode step). Default true; false "
             "always drafts --draft-max"),
    cl::init(true), cl::cat(runCategory));
static cl::opt<bool> draftTestWrong(
    "draft-test-wrong", cl::Hidden,
    cl::desc("Test hook: every draft token is wrong (acceptance forced to "
             "zero)"),
    cl::cat(runCategory));

namespace {

using kiln::tool::DraftController;
using kiln::tool::ngramDraft;

/// Most bytes kiln-run reads for --chat-template (the artifact loader's
/// limit for a stored template too) and for --prompt-file (far more text
/// than any compiled context holds: the prompt is refused before it is
/// tokenized whole).
constexpr uint64_t kMaxChatTemplateBytes = uint64_t(1) << 20;
constexpr uint64_t kMaxPromptBytes = uint64_t(16) << 20;

[[noreturn]] void fail(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "kiln-run: error: %s\n", message.c_str());
  std::exit(1);
}

/// Exits with the status's message if it is an error.
void check(kiln_rt_status_t status) {
  if (!status)
    return;
  std::string msg = kiln_rt_status_message(status);
  kiln_rt_status_free(status);
  fail(msg);
}

double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch())
      .count();
}

std::vector<int32_t> parseTokenList(const std::string &text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find(',', i);
    if (end == std::string::npos)
      end = text.size();
    std::string item = text.substr(i, end - i);
    char *stop = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || errno || v < INT32_MIN || v > INT32_MAX)
      fail("--tokens: '" + item + "' is not a token id");
    ids.push_back(int32_t(v));
    i = end + 1;
  }
  if (ids.empty())
    fail("--tokens: no token ids given");
  return ids;
}

/// run.c safe_printf: print a piece unless it is a lone control byte.
void printPiece(const char *piece, size_t len) {
  if (len == 0)
    return;
  if (len == 1) {
    unsigned char b = static_cast<unsigned char>(piece[0]);
    if (b < 0x80 && !(std::isprint(b) || std::isspace(b)))
      return;
  }
  std::fwrite(piece, 1, len, stdout);
  std::fflush(stdout);
}

struct Runtime {
  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_session_t *session = nullptr;
  kiln_rt_sampler_t *sampler = nullptr;
  kiln::tool::Trace trace{traceFile, traceFile.getNumOccurrences() > 0};
  /// Collects the session's events and writes --trace (if given).
  void writeTrace() {
    trace.collect(session);
    if (llvm::Error e = trace.write("kiln-run", inputs()))
      fail(llvm::toString(std::move(e)));
  }
  /// What kiln-run reads, and --dump-logits: outputs never overwrite them.
  static std::vector<std::pair<llvm::StringRef, llvm::StringRef>> inputs() {
    return {{"ARTIFACT", artifactDir},
            {"--prompt-file", promptFile},
            {"--chat-template", chatTemplateFile},
            {"--trusted-keys", trustedKeys},
            {"--dump-logits", dumpLogits}};
  }
  ~Runtime() {
    kiln_rt_sampler_release(sampler);
    kiln_rt_session_release(session);
    kiln_rt_artifact_release(artifact);
    // A rank of an mpirun job leaves it cleanly at a normal exit only (an
    // error exits without: mpirun then ends every rank).
    kiln_rt_parallel_finalize();
  }
};

/// Tokens the serving engine delivers (its callback runs on the engine's
/// thread; kiln-run prints on the main thread).
struct EngineOutput {
  struct Event {
    int32_t token;
    kiln_rt_finish_reason_t finish;
    double ms;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  static void callback(void *user, uint64_t, int32_t token, float,
                       kiln_rt_finish_reason_t finish) {
    auto *out = static_cast<EngineOutput *>(user);
    std::lock_guard<std::mutex> lock(out->mu);
    out->events.push_back(Event{token, finish, nowMs()});
    out->cv.notify_one();
  }
};

/// Generates `maxTokens` tokens after `tokens` as one request of the serving
/// engine (api.h kiln_rt_engine_*: the batched step over a paged KV cache,
/// the path kiln-serve runs), printing each piece as it arrives. Returns
/// false, having printed nothing, when the artifact has no step entry point
/// (KILN_RT_UNIMPLEMENTED: scaled RoPE, --batch-step=false);
/// the caller then uses the session. Stops at BOS/EOS, as the session loop.
bool generateWithEngine(Runtime &rt, const kiln_rt_model_info_t &info,
                        const std::vector<int32_t> &tokens, int64_t ctx,
                        const kiln_rt_sampler_params_t &sampling,
                        int32_t threads, std::vector<int32_t> &generated,
                        double start, double &ttft, double &decodeStart,
                        double &decodeEnd) {
  kiln_rt_engine_options_t options{};
  options.max_batch = 1;
  options.context_length = int32_t(ctx);
  options.threads = threads;
  options.flags = KILN_RT_ENGINE_NO_PREFIX_CACHE;
  kiln_rt_engine_t *engine = nullptr;
  kiln_rt_status_t st = kiln_rt_engine_create(rt.artifact, &options, &engine);
  if (st && kiln_rt_status_code(st) == KILN_RT_UNIMPLEMENTED) {
    kiln_rt_status_free(st);
    return false;
  }
  check(st);
  EngineOutput out;
  const int32_t stops[2] = {info.bos_id, info.eos_id};
  kiln_rt_request_params_t params{};
  params.sampling = sampling;
  params.max_tokens = int32_t(maxTokens);
  params.stop_ids = stops;
  params.n_stop_ids = 2;
  uint64_t id = 0;
  st = kiln_rt_engine_submit(engine, tokens.data(), int64_t(tokens.size()),
                             &params, &EngineOutput::callback, &out, &id);
  if (st) {
    kiln_rt_engine_release(engine);
    check(st);
  }
  int32_t prev = tokens.back();
  const char *piece = nullptr;
  size_t len = 0;
  for (bool done = false; !done;) {
    std::deque<EngineOutput::Event> events;
    {
      std::unique_lock<std::mutex> lock(out.mu);
      out.cv.wait(lock, [&] { return !out.events.empty(); });
      events.swap(out.events);
    }
    for (const EngineOutput::Event &e : events) {
      if (e.finish != KILN_RT_FINISH_NONE) {
        done = true;
        if (e.finish == KILN_RT_FINISH_ERROR) {
          kiln_rt_status_t why = kiln_rt_engine_request_error(engine, id);
          std::string msg = why ? kiln_rt_status_message(why)
                                : "the serving engine failed the request";
          kiln_rt_status_free(why);
          kiln_rt_engine_release(engine);
          fail(msg);
        }
        if (e.finish == KILN_RT_FINISH_CANCELLED) {
          kiln_rt_engine_release(engine);
          fail("the serving engine cancelled the request");
        }
        break;
      }
      if (generated.empty() && ttft == 0) {
        ttft = e.ms - start;
        decodeStart = decodeEnd = e.ms;
      }
      if (e.token == info.bos_id || e.token == info.eos_id)
        continue; // FINISH_STOP follows
      generated.push_back(e.token);
      check(kiln_rt_detokenize(rt.artifact, prev, e.token, &piece, &len));
      printPiece(piece, len);
      decodeEnd = e.ms;
      prev = e.token;
    }
  }
  kiln_rt_engine_release(engine);
  return true;
}

void writeLogits(Runtime &rt, const std::vector<int32_t> &tokens,
                 int64_t vocab) {
  int64_t n = int64_t(tokens.size());
  int64_t k = (n + 1) / 2;
  std::FILE *out = std::fopen(dumpLogits.c_str(), "wb");
  if (!out)
    fail(dumpLogits + ": cannot open for writing: " + std::strerror(errno));
  auto writeRow = [&] {
    const float *row = kiln_rt_session_logits(rt.session);
    if (!row)
      fail("the session's logits are unavailable");
    if (std::fwrite(row, sizeof(float), size_t(vocab), out) != size_t(vocab))
      fail(dumpLogits + ": write failed");
  };
  check(kiln_rt_session_prefill(rt.session, tokens.data(), k));
  writeRow();
  for (int64_t i = k; i < n; ++i) {
    check(kiln_rt_session_decode(rt.session, tokens[size_t(i)]));
    writeRow();
  }
  if (std::fclose(out) != 0)
    fail(dumpLogits + ": write failed");
}


/// Reads all of `path` ('-': stdin) for --prompt-file / --chat-template:
/// a regular file (a FIFO, device or directory is an error, never a hang,
/// an endless read or an empty prompt) of at most `maxBytes` bytes.
std::string readTextFile(const std::string &flag, const std::string &path,
                         uint64_t maxBytes) {
  std::string text, error;
  bool ok = path == "-" ? kiln::rt::readBoundedStdin(maxBytes, text, error)
                        : kiln::rt::readRegularFile(
                              path, maxBytes,
                              flag == "--chat-template" ? "a chat template"
                                                        : "a prompt file",
                              text, error);
  if (!ok)
    fail(flag + " " + (path == "-" ? "-: " + error : error));
  return text;
}

/// Tokenizes `text` (no BOS unless `addBos`).
std::vector<int32_t> tokenize(Runtime &rt, const std::string &text, bool addBos) {
  std::vector<int32_t> tokens(text.size() + 3);
  size_t count = 0;
  kiln_rt_status_t st = kiln_rt_tokenize(rt.artifact, text.data(), text.size(),
                                         addBos, tokens.data(), tokens.size(), &count);
  if (kiln_rt_status_code(st) == KILN_RT_OUT_OF_RANGE) { // buffer too small
    kiln_rt_status_free(st);
    tokens.resize(count);
    st = kiln_rt_tokenize(rt.artifact, text.data(), text.size(), addBos,
                          tokens.data(), tokens.size(), &count);
  }
  check(st);
  tokens.resize(count);
  return tokens;
}

void contextFullNote(int64_t ctx, bool limited) {
  std::fflush(stdout);
  std::fprintf(stderr,
               "\nkiln-run: note: generation stopped: the context of %lld "
               "tokens is full%s\n",
               (long long)ctx,
               limited ? " (--ctx)" : " (the compiled maximum; see --ctx)");
}

/// --chat: renders the conversation with the chat template, feeds the model
/// only what each turn adds (the KV cache is kept; the whole conversation is
/// re-run only when the template renders earlier turns differently), and
/// prints each answer up to the end-of-turn token.
int runChat(Runtime &rt, const kiln_rt_model_info_t &info, int64_t ctx) {
  kiln_rt_chat_info_t chat;
  kiln_rt_artifact_chat_info(rt.artifact, &chat);
  std::string source, sourceName;
  if (!chatTemplateFile.empty()) {
    source = readTextFile("--chat-template", chatTemplateFile, kMaxChatTemplateBytes);
    sourceName = chatTemplateFile;
  } else if (chat.template_text) {
    source.assign(chat.template_text, chat.template_len);
    sourceName = std::string(artifactDir) + "/chat_template.jinja";
  } else {
    fail(std::string(artifactDir) +
         " has no chat template (its checkpoint had none); pass "
         "--chat-template FILE");
  }
  kiln::chat::Template tmpl;
  std::string error;
  if (!tmpl.parse(source, sourceName, error))
    fail("chat template: " + error);
  const std::vector<int32_t> eot(chat.end_of_turn_ids,
                                 chat.end_of_turn_ids + chat.n_end_of_turn_ids);
  auto isEndOfTurn = [&](int32_t id) {
    return std::find(eot.begin(), eot.end(), id) != eot.end();
  };

  kiln::chat::Value messages = kiln::chat::Value::list();
  auto addMessage = [&](const char *role, const std::string &content) {
    kiln::chat::Value m = kiln::chat::Value::dict();
    m.set("role", kiln::chat::Value::string(role));
    m.set("content", kiln::chat::Value::string(content));
    messages.asList().push_back(m);
  };
  if (!systemPrompt.empty())
    addMessage("system", systemPrompt);
  auto render = [&](bool generationPrompt) {
    kiln::chat::Value context = kiln::chat::Value::dict();
    context.set("messages", messages);
    context.set("add_generation_prompt", kiln::chat::Value::boolean(generationPrompt));
    context.set("bos_token", kiln::chat::Value::string(chat.bos_token));
    context.set("eos_token", kiln::chat::Value::string(chat.eos_token));
    std::string text;
    if (!tmpl.render(context, text, error))
      fail("chat template: " + error);
    return text;
  };

  const bool terminal = ::isatty(STDIN_FILENO);
  std::string fed;       // the conversation text in the KV cache
  bool notedReprefill = false;
  int64_t turns = 0, generatedTotal = 0;
  double decodeMs = 0;
  std::string line;
  for (;;) {
    if (terminal) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line))
      break;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty())
      continue;
    addMessage("user", line);
    std::string full = render(true);
    std::string delta;
    bool fresh = fed.empty() || full.compare(0, fed.size(), fed) != 0;
    if (fresh && !fed.empty()) {
      if (!notedReprefill)
        std::fprintf(stderr, "kiln-run: note: the chat template renders earlier "
                             "turns differently once a turn is added; the "
                             "conversation is run again from the start\n");
      notedReprefill = true;
      kiln_rt_session_reset(rt.session);
    }
    delta = fresh ? full : full.substr(fed.size());
    bool addBos = fresh && chat.add_bos &&
                  !(chat.bos_token[0] && full.rfind(chat.bos_token, 0) == 0);
    if (verbosePrompt)
      std::fprintf(stderr, "kiln-run: prompt: %s\n", delta.c_str());
    std::vector<int32_t> tokens = tokenize(rt, delta, addBos);
    fed = full;
    int64_t pos = kiln_rt_session_position(rt.session);
    // The turn's prompt and at least one token of the answer must fit.
    if (pos + int64_t(tokens.size()) >= ctx)
      fail("the conversation needs " +
           std::to_string(pos + int64_t(tokens.size()) + 1) +
           " tokens of context (this turn's prompt and one answer token) but "
           "the session has " + std::to_string(ctx) +
           (ctxSize ? " (--ctx)" : " (the compiled maximum)"));
    ++turns;
    if (!tokens.empty())
      check(kiln_rt_session_prefill(rt.session, tokens.data(), int64_t(tokens.size())));
    int32_t prev = tokens.empty() ? info.bos_id : tokens.back();
    std::string answer;
    int64_t generated = 0;
    double start = nowMs();
    for (;;) {
      int32_t next = 0;
      {
        kiln::tool::Trace::Scope span(rt.trace, "sample");
        check(kiln_rt_session_sample(rt.session, rt.sampler, &next));
      }
      if (isEndOfTurn(next))
        break;
      const char *piece = nullptr;
      size_t len = 0;
      {
        kiln::tool::Trace::Scope span(rt.trace, "detokenize");
        check(kiln_rt_detokenize(rt.artifact, prev, next, &piece, &len));
      }
      printPiece(piece, len);
      answer.append(piece, len);
      prev = next;
      ++generated;
      if (generated >= maxTokens)
        break;
      if (kiln_rt_session_position(rt.session) >= ctx) {
        contextFullNote(ctx, ctxSize != 0);
        break;
      }
      check(kiln_rt_session_decode(rt.session, next));
    }
    decodeMs += nowMs() - start;
    generatedTotal += generated;
    std::printf("\n");
    std::fflush(stdout);
    // The cache now holds the rendered prompt and the answer's tokens; the
    // next render continues after them (the end-of-turn text included).
    fed += answer;
    addMessage("assistant", answer);
    if (kiln_rt_session_position(rt.session) >= ctx) {
      // Nothing more fits: turns still waiting are an error, not silently
      // dropped (exit status 1 tells a script its input went unanswered).
      std::string rest;
      while (std::getline(std::cin, rest))
        if (!rest.empty() && rest != "\r")
          fail("the context of " + std::to_string(ctx) + " tokens is full " +
               (ctxSize ? "(--ctx)" : "(the compiled maximum)") + " after " +
               std::to_string(turns) + " turn(s); the next turn ('" +
               rest.substr(0, 40) + (rest.size() > 40 ? "...')" : "')") +
               " cannot be answered: start a new conversation or use a "
               "larger --ctx");
      break;
    }
  }
  if (terminal)
    std::printf("\n");
  std::fprintf(stderr, "chat: %lld turns, %lld tokens generated, %.1f tokens/s\n",
               (long long)turns, (long long)generatedTotal,
               decodeMs > 0 ? double(generatedTotal) * 1000.0 / decodeMs : 0.0);
  rt.writeTrace();
  return 0;
}

} // namespace

/// Other runners' names for our flags (llama.cpp's -n, -p, --temp, -s).
static const kiln::tool::FlagAlias kRunAliases[] = {
    {"n", "max-tokens"},  {"n-predict", "max-tokens"},
    {"max-new-tokens", "max-tokens"}, {"p", "prompt"},
    {"temp", "temperature"}, {"s", "seed"}};

int main(int argc, char **argv) {
  kiln::tool::ToolMain tool(argc, argv, "kiln-run",
                            kiln::tool::ToolKind::Runtime);
  cl::opt<int64_t> &threadCount = kiln::tool::threadsOption(runCategory);
  cl::HideUnrelatedOptions(runCategory);
  kiln::tool::parseCommandLine(
      argc, argv,
      "Kiln artifact runner: generates text from a compiled model\n\n"
      "  Prints the prompt and the generated text on stdout; TTFT and decode\n"
      "  throughput on stderr.\n",
      kRunAliases);

  if (maxTokens < 0)
    fail("--max-tokens must be >= 0, got " + std::to_string(maxTokens));
  if (!(temperature >= 0.0f) || std::isinf(temperature))
    fail("--temperature must be a finite number >= 0, got " +
         std::to_string(temperature));
  if (topK < 0)
    fail("--top-k must be >= 0, got " + std::to_string(topK));
  if (!(topP >= 0.0f && topP <= 1.0f))
    fail("--top-p must be in [0, 1], got " + std::to_string(topP));
  if (!tokenList.empty() && !prompt.empty())
    fail("--tokens and --prompt are mutually exclusive");
  if (promptFile.getNumOccurrences() && prompt.getNumOccurrences())
    fail("--prompt and --prompt-file are mutually exclusive");
  if (promptFile.getNumOccurrences() && !tokenList.empty())
    fail("--tokens and --prompt-file are mutually exclusive");
  if (promptFile.getNumOccurrences() && promptFile.empty())
    fail("--prompt-file needs a file name, or '-' for standard input");
  if (ctxSize < 0)
    fail("--ctx must be >= 1 (or 0 for the compiled maximum), got " +
         std::to_string(ctxSize));
  if (chatMode && (prompt.getNumOccurrences() || promptFile.getNumOccurrences() ||
                   !tokenList.empty() || !dumpLogits.empty()))
    fail("--chat reads the user's turns from standard input: it cannot be "
         "combined with --prompt, --prompt-file, --tokens or --dump-logits "
         "(use --system for a system message)");
  if (!chatMode && (systemPrompt.getNumOccurrences() ||
                    chatTemplateFile.getNumOccurrences() || verbosePrompt))
    fail("--system, --chat-template and --verbose-prompt need --chat");
  if (chatMode && maxTokens == 0)
    fail("--chat needs --max-tokens >= 1");
  if (chatMode && noSpecial)
    fail("--no-special does not apply to --chat: the rendered conversation "
         "needs the template's special tokens (<|im_start|> and the like) "
         "recognised, so special-token text is recognised in every turn, as "
         "Hugging Face and llama.cpp do");
  if (promptFile.getNumOccurrences())
    prompt = readTextFile("--prompt-file", promptFile, kMaxPromptBytes);
  const bool speculate = speculativeMode.getNumOccurrences() > 0;
  // The draft kind, and the draft model's artifact for self / draft:ART.
  std::string draftKind = speculativeMode, draftPath;
  if (speculate) {
    if (speculativeMode.rfind("draft:", 0) == 0) {
      draftKind = "draft";
      draftPath = speculativeMode.substr(6);
      if (draftPath.empty())
        fail("--speculative=draft:ART needs the draft artifact's directory "
             "after 'draft:'");
    } else if (speculativeMode == "self") {
      draftPath = std::string(artifactDir) + "/self-draft";
      if (!llvm::sys::fs::is_directory(draftPath))
        fail("--speculative=self: " + std::string(artifactDir) +
             " has no self-draft (" + draftPath +
             "); compile it with kiln-compile --speculative --self-draft");
    } else if (speculativeMode != "ngram" && speculativeMode != "suffix") {
      fail("unsupported --speculative='" + speculativeMode +
           "' (expected ngram, suffix, self or draft:ART)");
    }
  }
  if (draftMax.getNumOccurrences() && !speculate)
    fail("--draft-max needs --speculative");
  if (draftMax < 1 || draftMax > 32)
    fail("--draft-max must be in [1, 32] draft tokens, got " +
         std::to_string(draftMax));
  if (speculate && (chatMode || !dumpLogits.empty()))
    fail("--speculative applies to plain generation, not --chat or "
         "--dump-logits");

  if (trustedKeys.getNumOccurrences() && trustedKeys.empty())
    fail("--trusted-keys needs a directory of *.pub keys or a key file; an "
         "empty value would turn signature checks off");
  if (noVerify && !trustedKeys.empty())
    fail("--no-verify and --trusted-keys are mutually exclusive (a signature "
         "covers the files only if their hashes are checked)");

  Runtime rt;
  if (llvm::Error e = rt.trace.checkPath(Runtime::inputs()))
    fail(llvm::toString(std::move(e)));
  if (!dumpLogits.empty()) {
    // A test hook, but an output all the same: never over an input (the
    // artifact's weights.bin is memory-mapped while it is written).
    std::vector<std::pair<llvm::StringRef, llvm::StringRef>> in =
        Runtime::inputs();
    in.pop_back(); // itself
    if (llvm::Error e = mlir::kiln::checkOutputIsNotAnInput(dumpLogits, in,
                                                           "--dump-logits"))
      fail(llvm::toString(std::move(e)));
  }
  // One rank of an mpirun job (a partitioned artifact, docs/parallelism.md):
  // join the job before opening the artifact, which maps this rank's shard.
  int32_t rank = 0, ranks = 1;
  if (kiln_rt_parallel_launched())
    check(kiln_rt_parallel_init(&rank, &ranks));
  const int threadsApplied = kiln::tool::applyThreads(
      threadCount, threadCount.getNumOccurrences() > 0);
  kiln_rt_open_options_t openOptions{};
  openOptions.flags = noVerify ? KILN_RT_OPEN_SKIP_CHECKSUMS : 0;
  openOptions.trusted_keys = trustedKeys.empty() ? nullptr : trustedKeys.c_str();
  check(kiln_rt_artifact_open_with_options(artifactDir.c_str(), &openOptions,
                                           &rt.artifact));
  if (rank != 0) {
    // The other ranks run rank 0's steps on their shards until it is done;
    // rank 0 alone reads the prompt and prints.
    check(kiln_rt_parallel_follow(rt.artifact));
    return 0;
  }
  kiln_rt_model_info_t info;
  kiln_rt_artifact_info(rt.artifact, &info);
  if (ctxSize > info.max_seq_len)
    fail("--ctx " + std::to_string(ctxSize) +
         " exceeds the artifact's compiled maximum context of " +
         std::to_string(info.max_seq_len) +
         " tokens (recompile with kiln-compile --max-seq-len)");
  // The session (contiguous KV cache of `ctx` positions) is created only
  // where it runs: --chat, --dump-logits, --trace, --no-engine, and
  // artifacts or runs the serving engine does not take.
  const int64_t ctx = ctxSize ? int64_t(ctxSize) : info.max_seq_len;
  auto openSession = [&] {
    kiln_rt_session_options_t sessionOptions{};
    sessionOptions.context_length = ctxSize;
    check(kiln_rt_session_create_with_options(rt.artifact, &sessionOptions,
                                              &rt.session));
    rt.trace.attach(rt.session);
  };

  if (chatMode) {
    openSession();
    kiln_rt_sampler_params_t params;
    params.temperature = temperature;
    params.top_k = topK;
    params.top_p = topP;
    params.seed = seed.getNumOccurrences() ? uint64_t(seed)
                                           : uint64_t(std::time(nullptr));
    check(kiln_rt_sampler_create(&params, info.vocab_size, &rt.sampler));
    return runChat(rt, info, ctx);
  }

  double start = nowMs();
  std::vector<int32_t> tokens;
  if (!tokenList.empty()) {
    tokens = parseTokenList(tokenList);
    for (int32_t id : tokens)
      if (id < 0 || id >= info.vocab_size)
        fail("--tokens: token id " + std::to_string(id) +
             " is outside the vocabulary [0, " + std::to_string(info.vocab_size) +
             ")");
  } else {
    tokens.resize(prompt.size() + 3);
    size_t count = 0;
    uint32_t flags = KILN_RT_TOKENIZE_ADD_SPECIAL |
                     (noSpecial ? KILN_RT_TOKENIZE_NO_SPECIAL : 0u);
    kiln_rt_status_t st =
        kiln_rt_tokenize_ex(rt.artifact, prompt.data(), prompt.size(), flags,
                            tokens.data(), tokens.size(), &count);
    if (kiln_rt_status_code(st) == KILN_RT_OUT_OF_RANGE) { // buffer too small
      kiln_rt_status_free(st);
      tokens.resize(count);
      st = kiln_rt_tokenize_ex(rt.artifact, prompt.data(), prompt.size(),
                               flags, tokens.data(), tokens.size(), &count);
    }
    check(st);
    tokens.resize(count);
    if (tokens.empty())
      tokens.push_back(info.bos_id);
  }
  if (printPromptTokens) {
    std::string line = "prompt:";
    for (int32_t id : tokens)
      line += " " + std::to_string(id);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  int64_t promptLen = int64_t(tokens.size());
  if (promptLen > ctx)
    fail("prompt is " + std::to_string(promptLen) + " tokens but the " +
         (ctxSize ? "--ctx context" : "model's context") + " is " +
         std::to_string(ctx) + " tokens");

  if (!dumpLogits.empty()) {
    openSession();
    writeLogits(rt, tokens, info.vocab_size);
    rt.writeTrace();
    return 0;
  }

  kiln_rt_sampler_params_t params;
  params.temperature = temperature;
  params.top_k = topK;
  params.top_p = topP;
  params.seed = seed.getNumOccurrences() ? uint64_t(seed)
                                         : uint64_t(std::time(nullptr));
  check(kiln_rt_sampler_create(&params, info.vocab_size, &rt.sampler));

  // Echo the prompt as typed; --tokens has no text, so its tokens are
  // decoded, each after its predecessor (as run.c does).
  const char *piece = nullptr;
  size_t len = 0;
  if (tokenList.empty()) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  } else {
    for (int64_t i = 1; i < promptLen; ++i) {
      check(kiln_rt_detokenize(rt.artifact, tokens[size_t(i - 1)],
                               tokens[size_t(i)], &piece, &len));
      printPiece(piece, len);
    }
  }

  std::vector<int32_t> generated;
  double ttft = 0, decodeStart = 0, decodeEnd = 0;
  // The serving engine where it applies: the prompt and every requested
  // token fit the context (the session path also runs into a full context,
  // with a note). cuda artifacts stay on the session (device sampling, CUDA
  // graphs) until the CUDA step has been checked on a GPU
  // (scripts/gpu-check.sh); kiln-serve runs them on the engine.
  bool done = false;
  const bool cudaArtifact = info.target && std::string(info.target) == "cuda";
  if (maxTokens > 0 && !noEngine && traceFile.empty() && !cudaArtifact &&
      !speculate && promptLen + maxTokens <= ctx)
    done = generateWithEngine(
        rt, info, tokens, ctx, params,
        threadCount.getNumOccurrences() ? int32_t(threadCount)
        : ranks > 1                     ? int32_t(threadsApplied)
                                        : 0,
        generated,
        start, ttft, decodeStart, decodeEnd);
  // Speculative decoding: each step drafts up to --draft-max tokens (the
  // adaptive controller picks how many), feeds the last token and the
  // draft through the verify entry point, keeps the draft tokens the model
  // accepts plus the token after them, and rolls the rest back.
  int64_t specSteps = 0, specDrafted = 0, specAccepted = 0, specPlain = 0;
  DraftController controller;
  double draftStepMs = 0.0;
  if (!done && maxTokens > 0 && speculate) {
    done = true;
    openSession();
    check(kiln_rt_session_prefill(rt.session, tokens.data(), promptLen));
    std::vector<int32_t> history = tokens;
    std::vector<float> rows, qRows;
    const int64_t vocab = info.vocab_size;
    kiln::tool::SuffixIndex suffix;
    if (draftKind == "suffix")
      suffix.beginRequest(tokens);
    std::unique_ptr<kiln::tool::DraftModel> draftModel;
    if (!draftPath.empty()) {
      draftModel = std::make_unique<kiln::tool::DraftModel>();
      kiln_rt_sampler_params_t sampling{};
      sampling.temperature = temperature;
      sampling.top_k = topK;
      sampling.top_p = topP;
      sampling.seed = params.seed;
      std::string err =
          draftModel->open(draftPath, rt.artifact, sampling, !noVerify);
      if (!err.empty())
        fail("--speculative=" + speculativeMode + ": " + err);
    }
    const bool modelDraft = draftModel != nullptr;
    if (modelDraft)
      controller.optimistic();
    const bool sampling = temperature != 0.0f;
    int32_t prev = tokens.back();
    int32_t next = 0;
    {
      kiln::tool::Trace::Scope span(rt.trace, "sample");
      check(kiln_rt_session_sample(rt.session, rt.sampler, &next));
    }
    ttft = nowMs() - start;
    // The step costs C(k): a decode step and verify steps of 2 .. K + 1
    // rows, timed here (best of 3, after a warm-up) and rolled back, plus
    // k draft-model decode steps for model drafts.
    if (draftAdaptive) {
      const int64_t base = kiln_rt_session_position(rt.session);
      const int64_t most =
          std::min<int64_t>(int64_t(draftMax), ctx - base - 1);
      std::vector<int32_t> probe(size_t(std::max<int64_t>(most, 0) + 1), next);
      rows.resize(probe.size() * size_t(vocab));
      auto timeStep = [&](int64_t n) {
        double best = 1e300;
        for (int rep = 0; rep < 3; ++rep) {
          const double t0 = nowMs();
          if (n == 1)
            check(kiln_rt_session_decode(rt.session, next));
          else
            check(kiln_rt_session_verify(rt.session, probe.data(), n,
                                         rows.data()));
          best = std::min(best, nowMs() - t0);
          check(kiln_rt_session_rollback(rt.session, base));
        }
        return std::max(best, 1e-3);
      };
      if (modelDraft) {
        std::vector<int32_t> h = history;
        h.push_back(next);
        draftStepMs = draftModel->stepCostMs(h);
      }
      if (base < ctx) {
        (void)timeStep(1); // warm-up
        // More rows never cost less (monotone: sub-millisecond steps of a
        // small model time within noise of each other).
        for (int64_t n = 1; n <= most + 1; ++n)
          controller.costMs.push_back(
              std::max(timeStep(n) + double(n - 1) * draftStepMs,
                       n > 1 ? controller.costMs.back() : 0.0));
      }
    }
    decodeStart = decodeEnd = nowMs();
    // Emits `t` unless it ends the generation; false when it does.
    auto emit = [&](int32_t t) {
      if (t == info.bos_id || t == info.eos_id)
        return false;
      generated.push_back(t);
      history.push_back(t);
      if (draftKind == "suffix")
        suffix.append(t);
      check(kiln_rt_detokenize(rt.artifact, prev, t, &piece, &len));
      printPiece(piece, len);
      decodeEnd = nowMs();
      prev = t;
      return int64_t(generated.size()) < maxTokens;
    };
    bool going = emit(next);
    // Plain steps since a model draft was last tried (probes keep the
    // acceptance estimate current while the controller decodes plainly).
    int64_t sinceProbe = 0;
    const bool probing = !draftAdaptive || controller.canPay();
    int64_t probeEvery = 16;
    bool probed = false;
    std::vector<int32_t> draft;
    while (going) {
      const int64_t position = kiln_rt_session_position(rt.session);
      if (position >= ctx) {
        contextFullNote(ctx, ctxSize != 0);
        break;
      }
      // Room for the last token and the draft in the context and the
      // token budget (every accepted draft token is generated output).
      int64_t room = std::min<int64_t>(
          {int64_t(draftMax), ctx - position - 1,
           maxTokens - int64_t(generated.size()) - 1});
      int64_t k = 0;
      if (modelDraft) {
        // A draft model's tokens cost draft steps: choose k first.
        k = draftAdaptive && !controller.costMs.empty()
                ? controller.choose(room)
                : std::max<int64_t>(room, 0);
        // While the controller decodes plainly, one draft token every
        // probeEvery steps keeps the acceptance estimate current (a probe
        // costs the draft's catch-up prefill and a draft step): 16 steps,
        // doubled after each failed probe up to 1024, back to 16 after a
        // kept one; none when no draft length could pay at all.
        int64_t want = k;
        if (k == 0 && room > 0 && probing && ++sinceProbe >= probeEvery) {
          want = 1; // a one-token probe for the acceptance estimate
          sinceProbe = 0;
          probed = true;
        }
        if (want > 0) {
          const uint64_t t0 = kiln_rt_clock_ns();
          check(draftModel->draft(history, want, draft,
                                  sampling ? &qRows : nullptr));
          if (rt.trace.enabled())
            rt.trace.span("draft", t0, kiln_rt_clock_ns(),
                          int64_t(draft.size()));
        } else {
          draft.clear();
        }
        if (want == k) // a probe stays a plain step, compared below
          k = int64_t(draft.size());
      } else {
        if (room > 0) {
          const uint64_t t0 = kiln_rt_clock_ns();
          draft = draftKind == "suffix" ? suffix.draft(room)
                                        : ngramDraft(history, room);
          if (rt.trace.enabled())
            rt.trace.span("draft", t0, kiln_rt_clock_ns(),
                          int64_t(draft.size()));
        } else {
          draft.clear();
        }
        k = draftAdaptive && !controller.costMs.empty()
                ? controller.choose(int64_t(draft.size()))
                : int64_t(draft.size());
      }
      if (draftTestWrong)
        for (int32_t &t : draft)
          t = int32_t((int64_t(t) + 1) % vocab);
      if (k == 0) {
        check(kiln_rt_session_decode(rt.session, next));
        check(kiln_rt_session_sample(rt.session, rt.sampler, &next));
        // The draft's first token against the decoded one: free evidence.
        if (!draft.empty())
          controller.observe(next == draft[0] ? 1 : 0, next != draft[0]);
        if (probed && !draft.empty())
          probeEvery = next == draft[0] ? 16 : std::min<int64_t>(
                                                   2 * probeEvery, 1024);
        probed = false;
        ++specPlain;
        going = emit(next);
        continue;
      }
      draft.resize(size_t(k));
      std::vector<int32_t> feed{next};
      feed.insert(feed.end(), draft.begin(), draft.end());
      rows.resize(size_t(int64_t(feed.size()) * vocab));
      check(kiln_rt_session_verify(rt.session, feed.data(),
                                   int64_t(feed.size()), rows.data()));
      ++specSteps;
      specDrafted += int64_t(draft.size());
      // Row i predicts the token after feed[i]; draft token i stands if
      // it is that prediction. Greedy: the row's argmax must be the draft
      // token; sampling: the speculative-sampling rule, for a point-mass
      // draft (kiln_rt_sampler_verify) or one drawn from the draft
      // model's q (kiln_rt_sampler_verify_q).
      size_t accepted = 0;
      const bool useQ = modelDraft && sampling && !draftTestWrong &&
                        qRows.size() >= draft.size() * size_t(vocab);
      for (;;) {
        const float *row = rows.data() + int64_t(accepted) * vocab;
        if (accepted == draft.size()) {
          next = kiln_rt_sampler_sample(rt.sampler, row);
          break;
        }
        int32_t kept = 0;
        next = useQ ? kiln_rt_sampler_verify_q(
                          rt.sampler, row,
                          qRows.data() + int64_t(accepted) * vocab,
                          draft[accepted], &kept)
                    : kiln_rt_sampler_verify(rt.sampler, row,
                                             draft[accepted], &kept);
        if (!kept)
          break;
        ++accepted;
        ++specAccepted;
        if (!(going = emit(next)))
          break;
      }
      if (rt.trace.enabled()) {
        const uint64_t now = kiln_rt_clock_ns();
        rt.trace.span("accept", now, now, int64_t(accepted));
      }
      controller.observe(int64_t(accepted), accepted < draft.size());
      // Keep the last token and the accepted drafts; forget the rest.
      check(kiln_rt_session_rollback(
          rt.session, position + 1 + int64_t(accepted)));
      if (going)
        going = emit(next);
    }
  }
  if (!done && maxTokens > 0) {
    openSession();
    check(kiln_rt_session_prefill(rt.session, tokens.data(), promptLen));
    int32_t prev = tokens.back();
    for (;;) {
      // Host sampling for cpu artifacts, device sampling for cuda ones.
      int32_t next = 0;
      {
        kiln::tool::Trace::Scope span(rt.trace, "sample");
        check(kiln_rt_session_sample(rt.session, rt.sampler, &next));
      }
      if (generated.empty()) {
        ttft = nowMs() - start;
        decodeStart = decodeEnd = nowMs();
      }
      if (next == info.bos_id || next == info.eos_id)
        break;
      generated.push_back(next);
      {
        kiln::tool::Trace::Scope span(rt.trace, "detokenize");
        check(kiln_rt_detokenize(rt.artifact, prev, next, &piece, &len));
      }
      printPiece(piece, len);
      decodeEnd = nowMs();
      prev = next;
      // Stop at the token budget or, with a note, at the end of the context.
      if (int64_t(generated.size()) >= maxTokens)
        break;
      if (kiln_rt_session_position(rt.session) >= ctx) {
        contextFullNote(ctx, ctxSize != 0);
        break;
      }
      check(kiln_rt_session_decode(rt.session, next));
    }
  }
  std::printf("\n");
  std::fflush(stdout);

  if (printTokens) {
    std::string line;
    for (size_t i = 0; i < generated.size(); ++i)
      line += (i ? " " : "") + std::to_string(generated[i]);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  int64_t decoded = generated.empty() ? 0 : int64_t(generated.size()) - 1;
  double decodeMs = decodeEnd - decodeStart;
  std::fprintf(stderr, "TTFT: %.2f ms\n", ttft);
  std::fprintf(stderr, "decode: %.1f tokens/s (%lld tokens)\n",
               decodeMs > 0 ? double(decoded) * 1000.0 / decodeMs : 0.0,
               (long long)decoded);
  if (speculate) {
    std::fprintf(stderr,
                 "speculative: %s, %lld verify steps, %lld draft tokens, "
                 "%lld accepted (acceptance %.1f%%)\n",
                 draftKind.c_str(), (long long)specSteps, (long long)specDrafted,
                 (long long)specAccepted,
                 specDrafted > 0 ? 100.0 * double(specAccepted) /
                                       double(specDrafted)
                                 : 0.0);
    if (draftAdaptive && !controller.costMs.empty()) {
      std::string costs;
      for (size_t k = 0; k < controller.costMs.size(); ++k)
      {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%s%.2f", k ? " " : "",
                      controller.costMs[k]);
        costs += buf;
      }
      std::fprintf(stderr,
                   "speculative: adaptive, %lld plain decode steps, "
                   "acceptance estimate %.2f, step cost by k (ms): %s\n",
                   (long long)specPlain, controller.acceptance(),
                   costs.c_str());
    // The speed-up against plain decoding, estimated from this run's
    // decode rate and the decode step's cost C(0) measured at start.
    if (draftAdaptive && !controller.costMs.empty() && decodeMs > 0 &&
        decoded > 0)
      std::fprintf(stderr,
                   "speculative: %.2fx the plain decode rate (%.1f tokens/s "
                   "against 1 / C(0) = %.1f tokens/s)\n",
                   double(decoded) * controller.costMs[0] / decodeMs,
                   double(decoded) * 1000.0 / decodeMs,
                   1000.0 / controller.costMs[0]);
    if (draftStepMs > 0.0)
      std::fprintf(stderr,
                   "speculative: draft model step %.2f ms (in the costs)\n",
                   draftStepMs);
    }
  }
  if (rt.session)
    rt.writeTrace();
  return 0;
}
