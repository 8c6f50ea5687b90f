//===- KilnServe.cpp - OpenAI-compatible HTTP server -------------*- C++ -*-===//
//
// kiln-serve ARTIFACT [--host H] [--port P] [--api-key KEY] [--max-batch N]
//            [--kv-cache-bytes B | --kv-cache-fraction F] [...]
//
// Serves an artifact over HTTP with the routes of OpenAI's API that vLLM and
// llama-server share (docs/serving.md, "kiln-serve"):
//   POST /v1/completions, POST /v1/chat/completions (stream: Server-Sent
//   Events), GET /v1/models, GET /health, GET /version, POST /tokenize,
//   POST /detokenize, GET /metrics (Prometheus text, vLLM's metric names).
//
// Threads: httplib's worker threads parse requests, tokenize, submit to the
// serving engine (api.h kiln_rt_engine_*) and wait on a per-request queue
// that the engine's callback feeds; the model runs only on the engine's own
// thread. The tokenizer is not thread-safe per artifact, so every
// tokenize/detokenize call holds one mutex. A client that disconnects has
// its request cancelled (the sequence ends before the engine's next step).
// SIGINT/SIGTERM: stop listening, cancel what runs, release the engine, exit
// 0. Errors at startup: "kiln-serve: error: ..." on stderr and exit status 1.
//
//===----------------------------------------------------------------------===//
#include "base/RegularFile.h"
#include "chat/ChatTemplate.h"
#include "kiln_rt/api.h"
#include "tools/common/Threads.h"
#include "tools/common/ToolSupport.h"

#include "llvm/Support/CommandLine.h"

// The accept queue of the listening socket: cpp-httplib's default of 5
// drops connections when many clients connect at once (64 in serve.test.py's
// load rounds; a burst of users in production); the kernel caps it at
// net.core.somaxconn.
#define CPPHTTPLIB_LISTEN_BACKLOG 1024
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cl = llvm::cl;
using Json = nlohmann::json;

static cl::OptionCategory serveCategory("kiln-serve options");

static cl::opt<std::string> artifactDir(cl::Positional, cl::Required,
                                        cl::desc("<artifact directory>"),
                                        cl::cat(serveCategory));
static cl::opt<std::string> host("host",
                                 cl::desc("Address to listen on (default "
                                          "127.0.0.1; 0.0.0.0 for every "
                                          "interface)"),
                                 cl::value_desc("ADDR"), cl::init("127.0.0.1"),
                                 cl::cat(serveCategory));
static cl::opt<int64_t> port("port",
                             cl::desc("TCP port (default 8000; 0 picks a free "
                                      "port, printed in the startup line)"),
                             cl::value_desc("P"), cl::init(8000),
                             cl::cat(serveCategory));
static cl::opt<std::string> apiKey(
    "api-key",
    cl::desc("Require 'Authorization: Bearer KEY' on /v1/*, /tokenize and "
             "/detokenize (default: the KILN_API_KEY environment variable, "
             "else no key)"),
    cl::value_desc("KEY"), cl::cat(serveCategory));
static cl::opt<std::string> servedModelName(
    "served-model-name",
    cl::desc("Model id in /v1/models and responses (default: the artifact's "
             "model name)"),
    cl::value_desc("NAME"), cl::cat(serveCategory));
static cl::opt<int64_t> maxBatch("max-batch",
                                 cl::desc("Most sequences in one engine step "
                                          "(default 16)"),
                                 cl::value_desc("N"), cl::init(16),
                                 cl::cat(serveCategory));
static cl::opt<std::string> kvCacheBytes(
    "kv-cache-bytes",
    cl::desc("Size of the paged KV-cache pool: bytes, or with a suffix K, M, "
             "G, T (powers of 1024; 'MiB' and 'MB' read the same), e.g. 512M "
             "(default: --kv-cache-fraction)"),
    cl::value_desc("BYTES"), cl::cat(serveCategory));
static cl::opt<double> kvCacheFraction(
    "kv-cache-fraction",
    cl::desc("With no --kv-cache-bytes: this fraction (0, 1] of physical "
             "memory for the KV-cache pool (default: the smaller of 10% and "
             "room for --max-batch full-context sequences)"),
    cl::value_desc("F"), cl::init(0.0), cl::cat(serveCategory));
static cl::opt<int64_t> blockSize("block-size",
                                  cl::desc("Tokens per KV-cache block (default "
                                           "16)"),
                                  cl::value_desc("N"), cl::init(16),
                                  cl::cat(serveCategory));
static cl::opt<int64_t> maxNumBatchedTokens(
    "max-num-batched-tokens",
    cl::desc("Token budget of one engine step, decode rows and prefill "
             "chunks together (default: the artifact's max prefill tokens)"),
    cl::value_desc("N"), cl::init(0), cl::cat(serveCategory));
static cl::opt<int64_t> maxQueue("max-queue",
                                 cl::desc("Waiting requests before new ones "
                                          "get 503 (default 256)"),
                                 cl::value_desc("N"), cl::init(256),
                                 cl::cat(serveCategory));
static cl::opt<int64_t> maxModelLen(
    "max-model-len",
    cl::desc("Context length per sequence, prompt and completion together "
             "(default: the artifact's compiled maximum)"),
    cl::value_desc("N"), cl::init(0), cl::cat(serveCategory));
static cl::opt<bool> noPrefixCaching("no-prefix-caching",
                                     cl::desc("Turn automatic prefix caching "
                                              "off"),
                                     cl::cat(serveCategory));
static cl::opt<std::string> speculativeMode(
    "speculative",
    cl::desc("Speculative decoding for every request (docs/speculative.md): "
             "off (default), ngram (prompt lookup) or suffix (the suffix "
             "index); each decode row may carry a draft of up to "
             "--draft-max tokens, verified in the same batched step, its "
             "length adapted per request to the measured acceptance and "
             "step cost. A request overrides it with the extension field "
             "\"speculative\": \"off\" | \"ngram\" | \"suffix\". cpu "
             "artifacts without --tp / --pp"),
    cl::value_desc("off|ngram|suffix"), cl::init("off"),
    cl::cat(serveCategory));
static cl::opt<int> draftMax(
    "draft-max",
    cl::desc("Most draft tokens per step with speculative decoding, 1 to 32 "
             "(default 5)"),
    cl::value_desc("K"), cl::init(5), cl::cat(serveCategory));
static cl::opt<bool> batchInvariant(
    "batch-invariant",
    cl::desc("Batch-invariant steps: a request's logits, logprobs and greedy "
             "tokens are bit-identical alone and beside any others (every "
             "linear sums in one order whatever the batch; slower, see "
             "docs/serving.md); vLLM's VLLM_BATCH_INVARIANT"),
    cl::cat(serveCategory));
static cl::opt<int> ppMicroBatches(
    "pp-micro-batches",
    cl::desc("Pipeline-parallel artifacts (kiln-compile --pp M): run each "
             "step as N micro-batches of its sequences so the stages "
             "overlap (GPipe); 0 = one per stage for steps that prefill, "
             "decode-only steps whole (default); 1 = off"),
    cl::init(0), cl::value_desc("N"), cl::cat(serveCategory));
static cl::opt<std::string> maxBodyBytes(
    "max-body-bytes",
    cl::desc("Largest request body accepted (default 1M); larger ones get "
             "413. Same suffixes as --kv-cache-bytes"),
    cl::value_desc("BYTES"), cl::init("1M"), cl::cat(serveCategory));
static cl::opt<int64_t> httpThreads(
    "http-threads",
    cl::desc("HTTP worker threads, one per open connection (default: "
             "--max-batch + --max-queue + 16, at least 64)"),
    cl::value_desc("N"), cl::init(0), cl::cat(serveCategory));
static cl::opt<std::string> chatTemplateFile(
    "chat-template",
    cl::desc("Render chat requests with this Jinja2 chat template instead of "
             "the artifact's"),
    cl::value_desc("FILE"), cl::cat(serveCategory));
static cl::opt<bool> noVerify("no-verify",
                              cl::desc("Skip XXH3 checksums of artifact files "
                                       "(sizes are still checked)"),
                              cl::cat(serveCategory));
static cl::opt<std::string> trustedKeys(
    "trusted-keys",
    cl::desc("Require the artifact to be signed by one of the Ed25519 public "
             "keys in DIR (docs/security.md)"),
    cl::value_desc("DIR"), cl::cat(serveCategory));
static cl::opt<bool> logRequests("log-requests",
                                 cl::desc("Print one line per HTTP request on "
                                          "stderr"),
                                 cl::cat(serveCategory));

namespace {

constexpr uint64_t kMaxChatTemplateBytes = uint64_t(1) << 20;

[[noreturn]] void fail(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "kiln-serve: error: %s\n", message.c_str());
  std::exit(1);
}

/// Takes `status` (may be NULL) and returns its message ("" for success).
std::string takeMessage(kiln_rt_status_t status, kiln_rt_status_code_t *code) {
  *code = kiln_rt_status_code(status);
  std::string msg = status ? kiln_rt_status_message(status) : "";
  kiln_rt_status_free(status);
  return msg;
}

void check(kiln_rt_status_t status) {
  if (!status)
    return;
  kiln_rt_status_code_t code;
  fail(takeMessage(status, &code));
}

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// Parses BYTES with an optional K/M/G/T suffix (powers of 1024, "iB"/"B"
/// after it allowed); false on anything else or on overflow.
bool parseBytes(const std::string &text, uint64_t &out) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit((unsigned char)text[i]) || text[i] == '.'))
    ++i;
  if (i == 0)
    return false;
  std::string number = text.substr(0, i), suffix = text.substr(i);
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(number.c_str(), &end);
  if (errno || *end || !(value >= 0))
    return false;
  double scale = 1;
  if (!suffix.empty()) {
    char s = char(std::toupper((unsigned char)suffix[0]));
    std::string rest = suffix.substr(1);
    if (s == 'K')
      scale = 1024.0;
    else if (s == 'M')
      scale = 1024.0 * 1024;
    else if (s == 'G')
      scale = 1024.0 * 1024 * 1024;
    else if (s == 'T')
      scale = 1024.0 * 1024 * 1024 * 1024;
    else if (s == 'B' && rest.empty())
      scale = 1;
    else
      return false;
    if (s != 'B' && !(rest.empty() || rest == "B" || rest == "iB" ||
                      rest == "ib" || rest == "b"))
      return false;
  }
  double bytes = value * scale;
  if (bytes >= 18446744073709551615.0 || bytes != std::floor(bytes))
    return false;
  out = uint64_t(bytes);
  return true;
}

//===----------------------------------------------------------------------===//
// Metrics (Prometheus text exposition, vLLM's names)
//===----------------------------------------------------------------------===//

/// A Prometheus histogram: counts per upper bound (not cumulative here;
/// rendered cumulatively with +Inf), sum and count.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts; ///< bounds.size() + 1 (the last is +Inf)
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> b)
      : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v) {
    size_t i = size_t(std::lower_bound(bounds.begin(), bounds.end(), v) -
                      bounds.begin());
    ++counts[i];
    sum += v;
    ++count;
  }
};

/// vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, ... up to `max`.
std::vector<double> buckets125(int64_t max) {
  std::vector<double> out;
  for (double m = 1;; m *= 10)
    for (double f : {1.0, 2.0, 5.0}) {
      if (f * m > double(max))
        return out;
      out.push_back(f * m);
    }
}

/// A sample value as Python's float repr would print it for integral
/// values ("3.0"), else the shortest round-tripping form.
std::string formatNumber(double v) {
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v))
    return "NaN";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return buf;
  }
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

/// Escapes a label value (backslash, double quote, newline).
std::string escapeLabel(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

struct Metrics {
  std::mutex mu;
  uint64_t promptTokens = 0, generationTokens = 0;
  std::map<std::string, uint64_t> finished{
      {"stop", 0}, {"length", 0}, {"abort", 0}, {"error", 0}};
  // vLLM's bucket bounds (vllm/v1/metrics/loggers.py).
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                  0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                  640.0, 2560.0}};
  Histogram itl{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram tpot{itl.bounds};
  Histogram e2e{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                 7680.0}};
  Histogram promptLen{{}}, genLen{{}};
};

//===----------------------------------------------------------------------===//
// The server's state
//===----------------------------------------------------------------------===//

/// One event from the engine callback.
struct Event {
  int32_t token;
  float logprob; ///< log softmax(logits)[token] (api.h)
  kiln_rt_finish_reason_t finish;
  Clock::time_point time;
};

/// What the engine callback feeds and a handler waits on.
struct RequestQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
};

/// The engine callback: queue the event and wake the waiting handler. The
/// notification happens under the lock, so that the handler cannot free
/// the queue between the unlock and the notify.
void onEngineEvent(void *user, uint64_t, int32_t token, float logprob,
                   kiln_rt_finish_reason_t finish) {
  auto *q = static_cast<RequestQueue *>(user);
  std::lock_guard<std::mutex> lock(q->mu);
  q->events.push_back(Event{token, logprob, finish, Clock::now()});
  q->cv.notify_one();
}

struct Server {
  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_engine_t *engine = nullptr;
  kiln_rt_model_info_t info{};
  kiln_rt_chat_info_t chat{};
  std::string modelName;
  int64_t context = 0;
  int64_t created = 0;
  std::string key;
  uint64_t maxBody = 0;
  std::vector<int32_t> endOfTurn;

  /// Every kiln_rt_tokenize / kiln_rt_detokenize call (not thread-safe per
  /// artifact) holds this.
  std::mutex tokMu;
  std::unique_ptr<kiln::chat::Template> tmpl;
  std::mutex tmplMu;

  /// Requests submitted and not yet finished, to cancel them all at shutdown;
  /// `stopping` refuses new ones. Both under regMu.
  std::mutex regMu;
  std::set<uint64_t> active;
  bool stopping = false;
  std::atomic<bool> engineFailed{false};

  Metrics metrics;
  std::mutex rngMu;
  std::mt19937_64 rng{std::random_device{}()};

  uint64_t randomSeed() {
    std::lock_guard<std::mutex> lock(rngMu);
    return rng() | 1; // 0 would mean the engine's fixed default seed
  }
  std::string newId(const char *prefix) {
    std::lock_guard<std::mutex> lock(rngMu);
    static const char *hex = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i)
      id += hex[rng() % 16];
    return id;
  }
};

Server *gServer = nullptr;
httplib::Server *gHttp = nullptr;

//===----------------------------------------------------------------------===//
// Errors in OpenAI's shape
//===----------------------------------------------------------------------===//

struct HttpError {
  int status = 0; ///< 0: no error
  std::string message, type, param, code;
  explicit operator bool() const { return status != 0; }
};

HttpError badRequest(const std::string &message, const std::string &param = "") {
  return HttpError{400, message, "invalid_request_error", param, ""};
}

std::string errorBody(const HttpError &e) {
  Json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
              {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}};
  return Json{{"error", err}}.dump(-1, ' ', false,
                                   Json::error_handler_t::replace);
}

void sendError(httplib::Response &res, const HttpError &e) {
  res.status = e.status;
  res.set_content(errorBody(e), "application/json");
}

void sendJson(httplib::Response &res, const Json &body) {
  res.status = 200;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace),
                  "application/json");
}

/// Parses the request body as a JSON object.
HttpError parseBody(const httplib::Request &req, Json &out) {
  try {
    out = Json::parse(req.body);
  } catch (const Json::parse_error &e) {
    return badRequest(std::string("the request body is not valid JSON: ") +
                      e.what());
  } catch (const Json::exception &e) {
    // out_of_range: a number beyond a double (1e999), anywhere in the body.
    return badRequest(std::string("the request body is not valid JSON: ") +
                      e.what());
  }
  if (!out.is_object())
    return badRequest("the request body must be a JSON object, got " +
                      std::string(out.type_name()));
  return {};
}

//===----------------------------------------------------------------------===//
// Field access with type checks: null or absent is "not given"; a value of
// the wrong type is a 400 naming the field.
//===----------------------------------------------------------------------===//

const Json *field(const Json &body, const char *name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null())
    return nullptr;
  return &*it;
}

HttpError typeError(const char *name, const char *expected, const Json &v) {
  return badRequest("'" + std::string(name) + "' must be " + expected +
                        ", got " + std::string(v.type_name()) + " " +
                        v.dump(-1, ' ', false, Json::error_handler_t::replace)
                            .substr(0, 60),
                    name);
}

HttpError getBool(const Json &body, const char *name, bool &out) {
  const Json *v = field(body, name);
  if (!v)
    return {};
  if (!v->is_boolean())
    return typeError(name, "a boolean", *v);
  out = v->get<bool>();
  return {};
}

HttpError getNumber(const Json &body, const char *name, double &out,
                    bool &given) {
  given = false;
  const Json *v = field(body, name);
  if (!v)
    return {};
  if (!v->is_number())
    return typeError(name, "a number", *v);
  out = v->get<double>();
  given = true;
  return {};
}

/// An integer (a number with an integral value, as pydantic accepts).
HttpError getInt(const Json &body, const char *name, int64_t &out,
                 bool &given) {
  given = false;
  const Json *v = field(body, name);
  if (!v)
    return {};
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      return badRequest("'" + std::string(name) + "' is out of range", name);
    out = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (d != std::floor(d) || std::fabs(d) > 9e18)
      return typeError(name, "an integer", *v);
    out = int64_t(d);
  } else {
    return typeError(name, "an integer", *v);
  }
  given = true;
  return {};
}

HttpError getString(const Json &body, const char *name, std::string &out,
                    bool &given) {
  given = false;
  const Json *v = field(body, name);
  if (!v)
    return {};
  if (!v->is_string())
    return typeError(name, "a string", *v);
  out = v->get<std::string>();
  given = true;
  return {};
}

//===----------------------------------------------------------------------===//
// Tokenizer (one mutex for every call)
//===----------------------------------------------------------------------===//

HttpError tokenize(Server &s, const std::string &text, uint32_t flags,
                   std::vector<int32_t> &out) {
  std::lock_guard<std::mutex> lock(s.tokMu);
  out.assign(text.size() + 3, 0);
  size_t count = 0;
  kiln_rt_status_t st = kiln_rt_tokenize_ex(s.artifact, text.data(), text.size(),
                                            flags, out.data(), out.size(), &count);
  if (kiln_rt_status_code(st) == KILN_RT_OUT_OF_RANGE) { // buffer too small
    kiln_rt_status_free(st);
    out.assign(count, 0);
    st = kiln_rt_tokenize_ex(s.artifact, text.data(), text.size(), flags,
                             out.data(), out.size(), &count);
  }
  kiln_rt_status_code_t code;
  std::string msg = takeMessage(st, &code);
  if (code != KILN_RT_OK)
    return badRequest("cannot tokenize the prompt: " + msg);
  out.resize(count);
  return {};
}

/// The text of `id` after `prev` ("" for an id the tokenizer does not know).
std::string detokenize(Server &s, int32_t prev, int32_t id) {
  std::lock_guard<std::mutex> lock(s.tokMu);
  const char *piece = nullptr;
  size_t len = 0;
  kiln_rt_status_t st = kiln_rt_detokenize(s.artifact, prev, id, &piece, &len);
  if (st) {
    kiln_rt_status_free(st);
    return "";
  }
  return std::string(piece, len);
}

//===----------------------------------------------------------------------===//
// Chat messages and the template
//===----------------------------------------------------------------------===//

kiln::chat::Value toValue(const Json &j) {
  using kiln::chat::Value;
  switch (j.type()) {
  case Json::value_t::null:
  case Json::value_t::discarded:
    return Value::none();
  case Json::value_t::boolean:
    return Value::boolean(j.get<bool>());
  case Json::value_t::number_integer:
    return Value::integer(j.get<int64_t>());
  case Json::value_t::number_unsigned:
    return Value::integer(int64_t(j.get<uint64_t>()));
  case Json::value_t::number_float:
    return Value::real(j.get<double>());
  case Json::value_t::string:
    return Value::string(j.get<std::string>());
  case Json::value_t::binary:
    return Value::none();
  case Json::value_t::array: {
    kiln::chat::ValueList items;
    for (const Json &x : j)
      items.push_back(toValue(x));
    return Value::list(std::move(items));
  }
  case Json::value_t::object: {
    Value d = Value::dict();
    for (auto it = j.begin(); it != j.end(); ++it)
      d.set(it.key(), toValue(it.value()));
    return d;
  }
  }
  return Value::none();
}

/// Validates `messages` and renders them with the chat template.
HttpError renderChat(Server &s, const Json &body, bool addGenerationPrompt,
                     std::string &out) {
  const Json *messages = field(body, "messages");
  if (!messages)
    return badRequest("'messages' is required", "messages");
  if (!messages->is_array())
    return typeError("messages", "an array of message objects", *messages);
  if (messages->empty())
    return badRequest("'messages' must not be empty", "messages");
  if (!s.tmpl)
    return badRequest("this model has no chat template (its checkpoint had "
                      "none); start kiln-serve with --chat-template FILE or "
                      "use /v1/completions");
  static const std::set<std::string> kRoles = {"system", "developer", "user",
                                               "assistant", "tool"};
  Json normalized = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json &m = (*messages)[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object())
      return badRequest("'" + where + "' must be an object, got " +
                            std::string(m.type_name()),
                        "messages");
    const Json *role = field(m, "role");
    if (!role || !role->is_string())
      return badRequest("'" + where + ".role' must be a string", "messages");
    std::string r = role->get<std::string>();
    if (!kRoles.count(r))
      return badRequest("'" + where + ".role' is '" + r +
                            "', expected one of system, developer, user, "
                            "assistant, tool",
                        "messages");
    std::string content;
    const Json *c = field(m, "content");
    if (c && c->is_string()) {
      content = c->get<std::string>();
    } else if (c && c->is_array()) {
      for (size_t k = 0; k < c->size(); ++k) {
        const Json &part = (*c)[k];
        std::string pw = where + ".content[" + std::to_string(k) + "]";
        if (!part.is_object())
          return badRequest("'" + pw + "' must be a content part object",
                            "messages");
        const Json *type = field(part, "type");
        if (!type || !type->is_string() || type->get<std::string>() != "text")
          return badRequest("'" + pw + ".type' must be \"text\" (this model "
                                       "takes text only)",
                            "messages");
        const Json *text = field(part, "text");
        if (!text || !text->is_string())
          return badRequest("'" + pw + ".text' must be a string", "messages");
        content += text->get<std::string>();
      }
    } else if (c) {
      return badRequest("'" + where + ".content' must be a string or an array "
                                      "of content parts, got " +
                            std::string(c->type_name()),
                        "messages");
    } else if (r != "assistant") {
      return badRequest("'" + where + ".content' is required", "messages");
    }
    Json n = m;
    n["role"] = r == "developer" ? "system" : r;
    n["content"] = content;
    normalized.push_back(n);
  }
  kiln::chat::Value context = kiln::chat::Value::dict();
  context.set("messages", toValue(normalized));
  context.set("add_generation_prompt",
              kiln::chat::Value::boolean(addGenerationPrompt));
  context.set("bos_token", kiln::chat::Value::string(s.chat.bos_token));
  context.set("eos_token", kiln::chat::Value::string(s.chat.eos_token));
  std::string error;
  std::lock_guard<std::mutex> lock(s.tmplMu);
  if (!s.tmpl->render(context, out, error))
    return badRequest("chat template: " + error, "messages");
  return {};
}

/// Tokens of a rendered conversation: BOS first when the tokenizer adds one
/// and the text does not already start with it (llama.cpp's rule, as
/// kiln-run --chat), special tokens written in the text recognised.
HttpError tokenizeChat(Server &s, const std::string &text,
                       std::vector<int32_t> &out) {
  bool addBos = s.chat.add_bos &&
                !(s.chat.bos_token[0] && text.rfind(s.chat.bos_token, 0) == 0);
  return tokenize(s, text, addBos ? uint32_t(KILN_RT_TOKENIZE_ADD_SPECIAL) : 0u, out);
}

//===----------------------------------------------------------------------===//
// Incremental text: UTF-8 hold-back and stop strings
//===----------------------------------------------------------------------===//

/// Bytes at the end of `s` that start a UTF-8 sequence not yet complete.
size_t incompleteUtf8Tail(const std::string &s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    unsigned char c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80)
      continue; // continuation byte: look further back
    size_t need = (c & 0x80) == 0 ? 1
                  : (c & 0xE0) == 0xC0 ? 2
                  : (c & 0xF0) == 0xE0 ? 3
                  : (c & 0xF8) == 0xF0 ? 4
                                       : 1; // invalid lead: emit as is
    return need > back ? back : 0;
  }
  return 0;
}

/// Assembles the completion's text from detokenized pieces: text that is
/// final (no stop string can still match across it, no UTF-8 sequence cut)
/// is released; the rest waits for the next piece or the end.
class TextAssembler {
public:
  explicit TextAssembler(std::vector<std::string> stops)
      : stops_(std::move(stops)) {}

  /// Adds `piece`; returns true if a stop string matched (the text before it
  /// is released, the rest dropped).
  bool add(const std::string &piece, std::string &released) {
    pending_ += piece;
    size_t best = std::string::npos;
    for (const std::string &stop : stops_) {
      size_t at = pending_.find(stop);
      if (at < best)
        best = at;
    }
    if (best != std::string::npos) {
      released += pending_.substr(0, best);
      pending_.clear();
      return true;
    }
    // Hold back the longest suffix that could start a stop string.
    size_t hold = 0;
    for (const std::string &stop : stops_)
      for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k)
        if (pending_.compare(pending_.size() - k, k, stop, 0, k) == 0) {
          hold = k;
          break;
        }
    size_t cut = pending_.size() - hold;
    cut -= incompleteUtf8Tail(pending_.substr(0, cut));
    released += pending_.substr(0, cut);
    pending_.erase(0, cut);
    return false;
  }
  /// The end: everything held back is text.
  void flush(std::string &released) {
    released += pending_;
    pending_.clear();
  }

private:
  std::vector<std::string> stops_;
  std::string pending_;
};

//===----------------------------------------------------------------------===//
// One generation request through the engine
//===----------------------------------------------------------------------===//

struct GenParams {
  std::vector<int32_t> prompt;
  int64_t maxTokens = 0;
  kiln_rt_sampler_params_t sampling{};
  std::vector<int32_t> stopIds;
  std::vector<std::string> stopStrings;
  bool stream = false, includeUsage = false, echo = false;
  /// Report each output token's log probability (completions `logprobs:
  /// 0`, chat `logprobs: true`).
  bool logprobs = false;
  std::string echoText;
  /// Speculative decoding (--speculative, or the request's "speculative").
  kiln_rt_speculative_params_t spec{};
};

/// An output token with its text and log probability (api.h: log
/// softmax of the raw logits).
struct TokenLogprob {
  std::string piece;
  float logprob;
};

/// Sockets of this process's connections, found by the peer's address: the
/// handler's connection, to notice a client that went away while its
/// request waits or runs (httplib 0.11 gives handlers no socket).
int findConnectionFd(const httplib::Request &req) {
  DIR *dir = opendir("/proc/self/fd");
  if (!dir)
    return -1;
  int found = -1;
  while (dirent *e = readdir(dir)) {
    char *end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end || end == e->d_name)
      continue;
    struct stat st;
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof(peer), ll = sizeof(local);
    if (getpeername(int(fd), (sockaddr *)&peer, &pl) != 0 ||
        getsockname(int(fd), (sockaddr *)&local, &ll) != 0)
      continue;
    char ip[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo((sockaddr *)&peer, pl, ip, sizeof(ip), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      continue;
    if (req.remote_addr != ip || req.remote_port != std::atoi(serv))
      continue;
    int localPort = local.ss_family == AF_INET6
                        ? ntohs(((sockaddr_in6 *)&local)->sin6_port)
                        : ntohs(((sockaddr_in *)&local)->sin_port);
    if (req.local_port >= 0 && localPort != req.local_port)
      continue;
    found = int(fd);
    break;
  }
  closedir(dir);
  return found;
}

/// True once the peer of `fd` closed or reset the connection.
bool peerClosed(int fd) {
  if (fd < 0)
    return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0)
    return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

class Generation {
public:
  Generation(Server &s, GenParams p, std::string id, Clock::time_point arrival)
      : s_(s), p_(std::move(p)), id_(std::move(id)), text_(p_.stopStrings),
        arrival_(arrival) {
    prev_ = p_.prompt.empty() ? s.info.bos_id : p_.prompt.back();
  }
  ~Generation() { waitForEngine(); }

  /// Submits to the engine; an error response on failure.
  HttpError submit() {
    kiln_rt_request_params_t rp{};
    rp.sampling = p_.sampling;
    rp.max_tokens = int32_t(p_.maxTokens);
    rp.stop_ids = p_.stopIds.data();
    rp.n_stop_ids = int32_t(p_.stopIds.size());
    std::lock_guard<std::mutex> lock(s_.regMu);
    if (s_.stopping)
      return HttpError{503, "the server is shutting down", "server_error", "",
                       "service_unavailable"};
    kiln_rt_status_t st = kiln_rt_engine_submit_speculative(
        s_.engine, p_.prompt.data(), int64_t(p_.prompt.size()), &rp,
        &p_.spec, onEngineEvent, &q_, &engineId_);
    kiln_rt_status_code_t code;
    std::string msg = takeMessage(st, &code);
    switch (code) {
    case KILN_RT_OK:
      submitted_ = true;
      s_.active.insert(engineId_);
      return {};
    case KILN_RT_RESOURCE_EXHAUSTED:
      return HttpError{503, "the server is overloaded: " + msg +
                                "; retry later",
                       "server_error", "", "service_unavailable"};
    case KILN_RT_INVALID_ARGUMENT:
    case KILN_RT_OUT_OF_RANGE:
      return badRequest(msg);
    case KILN_RT_UNIMPLEMENTED: // a feature this artifact's engine lacks
      return badRequest(msg, p_.spec.mode != KILN_RT_SPECULATIVE_OFF
                                 ? "speculative"
                                 : "");
    default:
      return HttpError{500, "the engine refused the request: " + msg,
                       "server_error", "", ""};
    }
  }

  /// Waits up to `ms` for engine events and processes them; appends the
  /// text now final to `released`. True once the request is over (the
  /// engine reported its end and the text is complete).
  bool poll(int ms, std::string &released) {
    std::vector<std::string> pieces;
    bool done = poll(ms, pieces);
    for (const std::string &p : pieces)
      released += p;
    return done;
  }
  /// As above, one piece of text per token that released some (streams
  /// send one event per token, as vLLM does).
  bool poll(int ms, std::vector<std::string> &pieces) {
    std::deque<Event> events;
    {
      std::unique_lock<std::mutex> lock(q_.mu);
      if (q_.events.empty() && !engineDone_)
        q_.cv.wait_for(lock, std::chrono::milliseconds(ms),
                       [&] { return !q_.events.empty(); });
      events.swap(q_.events);
    }
    for (const Event &e : events) {
      std::string text;
      process(e, text);
      textBytes_ += text.size();
      if (!text.empty())
        pieces.push_back(std::move(text));
    }
    return engineDone_;
  }

  /// Ends the request early (client gone); the engine confirms within one
  /// step.
  void abort() {
    if (!submitted_ || engineDone_ || cancelled_)
      return;
    cancelled_ = true;
    if (reason_.empty())
      reason_ = "abort";
    kiln_rt_engine_cancel(s_.engine, engineId_);
  }

  /// Blocks until the engine's final callback (after which it no longer
  /// touches the queue), cancelling first if the request still runs.
  void waitForEngine() {
    if (!submitted_)
      return;
    if (!engineDone_)
      abort();
    std::string ignored;
    while (!engineDone_)
      poll(100, ignored);
  }

  const std::string &finishReason() const { return reason_; }
  /// Why the engine failed the request (reason "error"), if it said.
  const std::string &errorMessage() const { return error_; }
  int64_t completionTokens() const { return generated_; }
  int64_t promptTokens() const { return int64_t(p_.prompt.size()); }
  const GenParams &params() const { return p_; }
  /// The output tokens' log probabilities so far (with params().logprobs).
  const std::vector<TokenLogprob> &logprobs() const { return logprobs_; }
  /// How many of logprobs() start inside the text released so far: a token
  /// still held back (a possible stop string) or cut by a stop string is
  /// not reported.
  size_t logprobsInText() const {
    size_t n = 0, at = 0;
    for (; n < logprobs_.size() && at < textBytes_; ++n)
      at += logprobs_[n].piece.size();
    return n;
  }
  const std::string &id() const { return id_; }

private:
  void process(const Event &e, std::string &released) {
    if (e.finish != KILN_RT_FINISH_NONE) {
      finishEngine(e, released);
      return;
    }
    if (textDone_)
      return; // a stop string already ended the text; the cancel is on its way
    if (generated_ == 0) {
      firstToken_ = e.time;
      std::lock_guard<std::mutex> lock(s_.metrics.mu);
      s_.metrics.ttft.observe(
          std::chrono::duration<double>(e.time - arrival_).count());
      s_.metrics.promptTokens += p_.prompt.size();
    } else {
      std::lock_guard<std::mutex> lock(s_.metrics.mu);
      double gap = std::chrono::duration<double>(e.time - lastToken_).count();
      s_.metrics.itl.observe(gap);
    }
    {
      std::lock_guard<std::mutex> lock(s_.metrics.mu);
      ++s_.metrics.generationTokens;
    }
    lastToken_ = e.time;
    ++generated_;
    if (std::find(p_.stopIds.begin(), p_.stopIds.end(), e.token) !=
        p_.stopIds.end())
      return; // a stop id: FINISH_STOP follows; its text is not output
    std::string piece = detokenize(s_, prev_, e.token);
    prev_ = e.token;
    if (p_.logprobs)
      logprobs_.push_back(TokenLogprob{piece, e.logprob});
    if (text_.add(piece, released)) {
      textDone_ = true;
      reason_ = "stop";
      if (!cancelled_) {
        cancelled_ = true;
        kiln_rt_engine_cancel(s_.engine, engineId_);
      }
    }
  }

  void finishEngine(const Event &e, std::string &released) {
    engineDone_ = true;
    {
      std::lock_guard<std::mutex> lock(s_.regMu);
      s_.active.erase(engineId_);
    }
    if (!textDone_)
      text_.flush(released);
    textDone_ = true;
    if (reason_.empty()) {
      switch (e.finish) {
      case KILN_RT_FINISH_LENGTH:
        reason_ = "length";
        break;
      case KILN_RT_FINISH_STOP:
        reason_ = "stop";
        break;
      case KILN_RT_FINISH_CANCELLED:
        reason_ = "abort"; // shutdown
        break;
      case KILN_RT_FINISH_ERROR: {
        // Non-finite logits: this request fails, the engine goes on.
        reason_ = "error";
        kiln_rt_status_t why = kiln_rt_engine_request_error(s_.engine, engineId_);
        if (why) {
          error_ = kiln_rt_status_message(why);
          kiln_rt_status_free(why);
        }
        break;
      }
      case KILN_RT_FINISH_NONE:
        reason_ = "error";
        s_.engineFailed = true;
        break;
      }
    }
    Metrics &m = s_.metrics;
    std::lock_guard<std::mutex> lock(m.mu);
    ++m.finished[reason_ == "stop" || reason_ == "length" || reason_ == "abort"
                     ? reason_
                     : "error"];
    m.e2e.observe(secondsSince(arrival_));
    m.promptLen.observe(double(p_.prompt.size()));
    m.genLen.observe(double(generated_));
    if (generated_ > 1)
      m.tpot.observe(std::chrono::duration<double>(lastToken_ - firstToken_).count() /
                     double(generated_ - 1));
  }

  Server &s_;
  GenParams p_;
  std::string id_;
  RequestQueue q_;
  TextAssembler text_;
  Clock::time_point arrival_, firstToken_, lastToken_;
  uint64_t engineId_ = 0;
  int32_t prev_ = -1;
  int64_t generated_ = 0;
  std::vector<TokenLogprob> logprobs_;
  size_t textBytes_ = 0; ///< generated text released so far (bytes)
  bool submitted_ = false, engineDone_ = false, textDone_ = false,
       cancelled_ = false;
  std::string reason_;
  std::string error_;
};

//===----------------------------------------------------------------------===//
// Request fields shared by /v1/completions and /v1/chat/completions
//===----------------------------------------------------------------------===//

/// Reads the sampling and stopping fields of `body` into `p` (its prompt
/// already set). `chat`: max_completion_tokens is accepted too.
HttpError readGenFields(Server &s, const Json &body, bool chat, GenParams &p) {
  HttpError e;
  bool given = false;
  // model: the served name (or absent).
  std::string model;
  if ((e = getString(body, "model", model, given)))
    return e;
  if (given && !model.empty() && model != s.modelName)
    return HttpError{404, "The model '" + model + "' does not exist; this "
                          "server serves '" + s.modelName + "'",
                     "invalid_request_error", "model", "model_not_found"};

  int64_t n = 1;
  if ((e = getInt(body, "n", n, given)))
    return e;
  if (given && n != 1)
    return badRequest("'n' must be 1 (one choice per request), got " +
                          std::to_string(n),
                      "n");
  int64_t bestOf = 1;
  if ((e = getInt(body, "best_of", bestOf, given)))
    return e;
  if (given && bestOf != 1)
    return badRequest("'best_of' must be 1, got " + std::to_string(bestOf),
                      "best_of");

  int64_t maxTokens = 0;
  bool maxGiven = false;
  const char *maxName = "max_tokens";
  if ((e = getInt(body, "max_tokens", maxTokens, maxGiven)))
    return e;
  if (chat && !maxGiven) {
    if ((e = getInt(body, "max_completion_tokens", maxTokens, maxGiven)))
      return e;
    maxName = "max_completion_tokens";
  }
  if (maxGiven && maxTokens < 1)
    return badRequest("'" + std::string(maxName) + "' must be at least 1, got " +
                          std::to_string(maxTokens),
                      maxName);

  double temperature = 1.0, topP = 1.0;
  if ((e = getNumber(body, "temperature", temperature, given)))
    return e;
  if (given && !(temperature >= 0.0 && std::isfinite(temperature)))
    return badRequest("'temperature' must be a finite number >= 0",
                      "temperature");
  if ((e = getNumber(body, "top_p", topP, given)))
    return e;
  if (given && !(topP > 0.0 && topP <= 1.0))
    return badRequest("'top_p' must be in (0, 1]", "top_p");
  int64_t topK = 0;
  if ((e = getInt(body, "top_k", topK, given)))
    return e;
  if (given && (topK < -1 || topK > INT32_MAX))
    return badRequest("'top_k' must be -1 or 0 (off) or a positive integer",
                      "top_k");
  int64_t seed = 0;
  bool seedGiven = false;
  if ((e = getInt(body, "seed", seed, seedGiven)))
    return e;
  // Speculative decoding: the server's --speculative unless the request's
  // extension field says otherwise.
  std::string specMode = speculativeMode;
  if ((e = getString(body, "speculative", specMode, given)))
    return e;
  if (specMode != "off" && specMode != "ngram" && specMode != "suffix")
    return badRequest("'speculative' must be \"off\", \"ngram\" or "
                      "\"suffix\", got \"" + specMode + "\"",
                      "speculative");
  p.spec.mode = specMode == "ngram"    ? KILN_RT_SPECULATIVE_NGRAM
                : specMode == "suffix" ? KILN_RT_SPECULATIVE_SUFFIX
                                       : KILN_RT_SPECULATIVE_OFF;
  p.spec.draft_max = int32_t(draftMax);
  for (const char *penalty : {"presence_penalty", "frequency_penalty"}) {
    double v = 0;
    if ((e = getNumber(body, penalty, v, given)))
      return e;
    if (given && v != 0.0)
      return badRequest("'" + std::string(penalty) +
                            "' is not supported (only 0)",
                        penalty);
  }
  // Fields this server cannot honour are refused, not ignored (vLLM's
  // sampling extensions included).
  for (const char *name :
       {"logit_bias", "tools", "tool_choice", "functions", "function_call",
        "prompt_logprobs", "guided_json", "guided_regex", "guided_choice",
        "guided_grammar", "structured_outputs", "bad_words", "allowed_token_ids"})
    if (const Json *v = field(body, name); v && !v->is_null())
      return badRequest("'" + std::string(name) + "' is not supported", name);
  for (const char *name : {"use_beam_search", "include_stop_str_in_output"})
    if (const Json *v = field(body, name); v && !(v->is_boolean() && !v->get<bool>()))
      return badRequest("'" + std::string(name) + "' is not supported (only false)",
                        name);
  {
    double minP = 0;
    if ((e = getNumber(body, "min_p", minP, given)))
      return e;
    if (given && minP != 0.0)
      return badRequest("'min_p' is not supported (only 0)", "min_p");
    int64_t minTokens = 0;
    if ((e = getInt(body, "min_tokens", minTokens, given)))
      return e;
    if (given && minTokens != 0)
      return badRequest("'min_tokens' is not supported (only 0)", "min_tokens");
  }
  if (const Json *rf = field(body, "response_format"); rf && !rf->is_null()) {
    if (!rf->is_object() || rf->value("type", Json()) != Json("text"))
      return badRequest("'response_format' is not supported (only {\"type\": "
                        "\"text\"})",
                        "response_format");
  }
  double rep = 1.0;
  if ((e = getNumber(body, "repetition_penalty", rep, given)))
    return e;
  if (given && rep != 1.0)
    return badRequest("'repetition_penalty' is not supported (only 1)",
                      "repetition_penalty");
  // Log probabilities of the sampled tokens only: chat `logprobs: true`
  // (top_logprobs 0), completions `logprobs: 0`; more alternatives are
  // refused rather than silently dropped.
  if (const Json *lp = field(body, "logprobs"); lp && !lp->is_null()) {
    if (chat ? !lp->is_boolean() : !lp->is_number_integer())
      return typeError("logprobs", chat ? "a boolean" : "an integer", *lp);
    if (!chat && lp->get<int64_t>() < 0)
      return badRequest("'logprobs' must be 0 or more, got " +
                            std::to_string(lp->get<int64_t>()),
                        "logprobs");
    if (!chat && lp->get<int64_t>() != 0)
      return badRequest("'logprobs' above 0 is not supported: this server "
                        "reports the sampled token's log probability only "
                        "(logprobs: 0)",
                        "logprobs");
    p.logprobs = chat ? lp->get<bool>() : true;
  }
  if (const Json *top = field(body, "top_logprobs"); top && !top->is_null()) {
    if (!chat)
      return badRequest("'top_logprobs' is a chat field; completions take "
                        "'logprobs'",
                        "top_logprobs");
    if (!top->is_number_integer())
      return typeError("top_logprobs", "an integer", *top);
    if (top->get<int64_t>() < 0)
      return badRequest("'top_logprobs' must be 0 or more, got " +
                            std::to_string(top->get<int64_t>()),
                        "top_logprobs");
    if (top->get<int64_t>() != 0)
      return badRequest("'top_logprobs' above 0 is not supported: this "
                        "server reports the sampled token's log probability "
                        "only",
                        "top_logprobs");
  }

  p.sampling.temperature = float(temperature);
  p.sampling.top_p = float(topP);
  p.sampling.top_k = topK < 0 ? 0 : int32_t(topK);
  p.sampling.seed = seedGiven ? (uint64_t(seed) ? uint64_t(seed) : 0x5EEDull)
                              : s.randomSeed();

  if ((e = getBool(body, "stream", p.stream)))
    return e;
  if (const Json *so = field(body, "stream_options")) {
    if (!so->is_object())
      return typeError("stream_options", "an object", *so);
    if ((e = getBool(*so, "include_usage", p.includeUsage)))
      return badRequest("'stream_options.include_usage' must be a boolean",
                        "stream_options");
  }

  // stop: a string or a list of strings (matched on the text).
  if (const Json *stop = field(body, "stop")) {
    if (stop->is_string()) {
      p.stopStrings.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json &x : *stop) {
        if (!x.is_string())
          return typeError("stop", "a string or an array of strings", *stop);
        p.stopStrings.push_back(x.get<std::string>());
      }
    } else {
      return typeError("stop", "a string or an array of strings", *stop);
    }
    p.stopStrings.erase(std::remove(p.stopStrings.begin(), p.stopStrings.end(),
                                    std::string()),
                        p.stopStrings.end());
    if (p.stopStrings.size() > 16)
      return badRequest("'stop' has more than 16 strings", "stop");
  }
  // Stop ids: the end-of-turn ids (chat) or EOS / BOS and the end-of-turn
  // ids (completions, as kiln-run); none with ignore_eos.
  bool ignoreEos = false;
  if ((e = getBool(body, "ignore_eos", ignoreEos)))
    return e;
  if (!ignoreEos) {
    std::vector<int32_t> ids = s.endOfTurn;
    if (!chat) {
      ids.push_back(s.info.eos_id);
      ids.push_back(s.info.bos_id);
    }
    for (int32_t id : ids)
      if (id >= 0 && std::find(p.stopIds.begin(), p.stopIds.end(), id) ==
                         p.stopIds.end())
        p.stopIds.push_back(id);
  }
  if (const Json *extra = field(body, "stop_token_ids")) {
    if (!extra->is_array())
      return typeError("stop_token_ids", "an array of token ids", *extra);
    for (const Json &x : *extra) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() >= s.info.vocab_size)
        return badRequest("'stop_token_ids' must hold token ids in [0, " +
                              std::to_string(s.info.vocab_size) + ")",
                          "stop_token_ids");
      p.stopIds.push_back(int32_t(x.get<int64_t>()));
    }
  }

  // Lengths against the context.
  const int64_t promptLen = int64_t(p.prompt.size());
  if (promptLen >= s.context)
    return badRequest("This model's maximum context length is " +
                          std::to_string(s.context) + " tokens. However, the "
                          "prompt has " + std::to_string(promptLen) +
                          " tokens, which leaves no room for the completion",
                      chat ? "messages" : "prompt");
  if (!maxGiven) {
    maxTokens = s.context - promptLen;
  } else if (promptLen + maxTokens > s.context) {
    return badRequest("This model's maximum context length is " +
                          std::to_string(s.context) + " tokens. However, you "
                          "requested " + std::to_string(promptLen + maxTokens) +
                          " tokens (" + std::to_string(promptLen) +
                          " in the prompt, " + std::to_string(maxTokens) +
                          " for the completion). Please reduce the prompt or '" +
                          maxName + "'",
                      maxName);
  }
  p.maxTokens = maxTokens;
  return {};
}

//===----------------------------------------------------------------------===//
// Responses
//===----------------------------------------------------------------------===//

Json usageJson(const Generation &g) {
  return Json{{"prompt_tokens", g.promptTokens()},
              {"completion_tokens", g.completionTokens()},
              {"total_tokens", g.promptTokens() + g.completionTokens()}};
}

std::string sseEvent(const Json &j) {
  return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) +
         "\n\n";
}

/// Characters (Unicode code points) of UTF-8 `s`: its bytes that do not
/// continue a sequence.
size_t utf8Chars(const std::string &s) {
  size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

/// OpenAI's `logprobs` object for output tokens [from, to) of `g` (at most
/// those inside the released text): chat's {"content": [{token, logprob,
/// bytes, top_logprobs: []}]}, or the completions' {tokens, token_logprobs,
/// top_logprobs (the sampled token alone, as vLLM reports logprobs 0),
/// text_offset (characters into the choice's text, as vLLM counts)}; null
/// without logprobs. A token that ends inside a multi-byte character reads
/// "\ufffd" in `tokens` / `token` (chat's `bytes` has its bytes).
Json logprobsJson(const Generation &g, bool chat, size_t from, size_t to) {
  if (!g.params().logprobs)
    return nullptr;
  const std::vector<TokenLogprob> &lp = g.logprobs();
  to = std::min(to, g.logprobsInText());
  from = std::min(from, to);
  if (chat) {
    Json content = Json::array();
    for (size_t i = from; i < to; ++i) {
      Json bytes = Json::array();
      for (unsigned char c : lp[i].piece)
        bytes.push_back(int(c));
      content.push_back(Json{{"token", lp[i].piece},
                             {"logprob", lp[i].logprob},
                             {"bytes", bytes},
                             {"top_logprobs", Json::array()}});
    }
    return Json{{"content", content}};
  }
  size_t offset = 0; // echo and logprobs are refused together
  for (size_t i = 0; i < from; ++i)
    offset += utf8Chars(lp[i].piece);
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(),
       offsets = Json::array();
  for (size_t i = from; i < to; ++i) {
    tokens.push_back(lp[i].piece);
    values.push_back(lp[i].logprob);
    tops.push_back(Json{{lp[i].piece, lp[i].logprob}});
    offsets.push_back(offset);
    offset += utf8Chars(lp[i].piece);
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", values},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

/// The chunk of a streamed response carrying `text` (or, with `finish`,
/// the finish reason and no text).
Json streamChunk(Server &s, const Generation &g, bool chat,
                 const std::string *text, const std::string *finish,
                 bool roleOnly = false, Json logprobs = nullptr) {
  Json choice = {{"index", 0}, {"logprobs", std::move(logprobs)}};
  if (chat) {
    Json delta = Json::object();
    if (roleOnly) {
      delta["role"] = "assistant";
      delta["content"] = "";
    } else if (text) {
      delta["content"] = *text;
    }
    choice["delta"] = delta;
  } else {
    choice["text"] = text ? *text : "";
  }
  choice["finish_reason"] = finish ? Json(*finish) : Json(nullptr);
  return Json{{"id", g.id()},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", int64_t(std::time(nullptr))},
              {"model", s.modelName},
              {"choices", Json::array({choice})}};
}

/// Runs `gen` to its end (no streaming) and writes the response.
void respondWhole(Server &s, std::shared_ptr<Generation> gen, bool chat,
                  int fd, httplib::Response &res) {
  std::string text = gen->params().echo ? gen->params().echoText : "";
  while (!gen->poll(50, text))
    if (peerClosed(fd) || gHttp->is_running() == false)
      gen->abort();
  std::string reason = gen->finishReason();
  if (reason == "abort" || reason == "error") {
    sendError(res, HttpError{reason == "abort" ? 503 : 500,
                             reason == "abort"
                                 ? "the request was cancelled (client gone or "
                                   "server shutting down)"
                                 : gen->errorMessage().empty()
                                       ? "the engine failed while running the "
                                         "request"
                                       : gen->errorMessage(),
                             "server_error", "", ""});
    return;
  }
  Json choice = {{"index", 0},
                 {"logprobs", logprobsJson(*gen, chat, 0, SIZE_MAX)},
                 {"finish_reason", reason}};
  if (chat)
    choice["message"] = Json{{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  Json body = {{"id", gen->id()},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", int64_t(std::time(nullptr))},
               {"model", s.modelName},
               {"choices", Json::array({choice})},
               {"usage", usageJson(*gen)}};
  sendJson(res, body);
}

/// Streams `gen` as Server-Sent Events (OpenAI's chunk format, then
/// "data: [DONE]").
void respondStream(Server &s, std::shared_ptr<Generation> gen, bool chat,
                   int fd, httplib::Response &res) {
  auto started = std::make_shared<bool>(false);
  // Output tokens whose log probabilities went out already: a chunk carries
  // those of the tokens decoded since the previous chunk.
  auto sent = std::make_shared<size_t>(0);
  auto provider = [&s, gen, chat, fd, started, sent](size_t,
                                                     httplib::DataSink &sink) {
    auto pendingLogprobs = [&]() -> Json {
      const size_t now = gen->logprobsInText();
      Json j = logprobsJson(*gen, chat, *sent, now);
      *sent = now;
      return j;
    };
    auto write = [&](const std::string &data) {
      if (!sink.write(data.data(), data.size())) {
        gen->abort();
        return false;
      }
      return true;
    };
    if (!*started) {
      *started = true;
      std::string first;
      if (chat)
        first += sseEvent(streamChunk(s, *gen, chat, nullptr, nullptr, true));
      if (gen->params().echo && !gen->params().echoText.empty())
        first += sseEvent(
            streamChunk(s, *gen, chat, &gen->params().echoText, nullptr));
      if (!first.empty() && !write(first))
        return false;
    }
    std::vector<std::string> pieces;
    bool done = gen->poll(50, pieces);
    std::string out;
    for (const std::string &text : pieces)
      out += sseEvent(streamChunk(s, *gen, chat, &text, nullptr, false,
                                  pendingLogprobs()));
    if (done) {
      const std::string reason = gen->finishReason();
      if (reason == "abort" || reason == "error") {
        HttpError e{reason == "abort" ? 503 : 500,
                    reason == "abort" ? std::string("the request was cancelled")
                    : gen->errorMessage().empty()
                        ? std::string("the engine failed while running the "
                                      "request")
                        : gen->errorMessage(),
                    "server_error", "", ""};
        out += "data: " + errorBody(e) + "\n\n";
      } else {
        out += sseEvent(streamChunk(s, *gen, chat, nullptr, &reason, false,
                                    pendingLogprobs()));
      }
      if (gen->params().includeUsage) {
        Json usage = streamChunk(s, *gen, chat, nullptr, nullptr);
        usage["choices"] = Json::array();
        usage["usage"] = usageJson(*gen);
        out += sseEvent(usage);
      }
      out += "data: [DONE]\n\n";
      if (!write(out))
        return false;
      sink.done();
      return true;
    }
    if (!out.empty())
      return write(out);
    if (peerClosed(fd) || !sink.is_writable()) {
      gen->abort();
      return false;
    }
    return true;
  };
  // The releaser runs when the response is destroyed, written or not: the
  // request ends there at the latest.
  auto releaser = [gen](bool) { gen->waitForEngine(); };
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", provider, releaser);
}

//===----------------------------------------------------------------------===//
// Handlers
//===----------------------------------------------------------------------===//

void handleGenerate(Server &s, const httplib::Request &req,
                    httplib::Response &res, bool chat) {
  const Clock::time_point arrival = Clock::now();
  Json body;
  if (HttpError e = parseBody(req, body))
    return sendError(res, e);
  GenParams p;
  if (chat) {
    std::string text;
    if (HttpError e = renderChat(s, body, true, text))
      return sendError(res, e);
    if (HttpError e = tokenizeChat(s, text, p.prompt))
      return sendError(res, e);
  } else {
    const Json *prompt = field(body, "prompt");
    if (!prompt)
      return sendError(res, badRequest("'prompt' is required", "prompt"));
    // A string, a list of token ids, or a list holding one of them.
    const Json *one = prompt;
    if (prompt->is_array() && prompt->size() == 1 &&
        ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
      one = &(*prompt)[0];
    else if (prompt->is_array() && !prompt->empty() &&
             ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
      return sendError(res, badRequest("'prompt' holds " +
                                           std::to_string(prompt->size()) +
                                           " prompts; send one per request",
                                       "prompt"));
    if (one->is_string()) {
      p.echoText = one->get<std::string>();
      if (HttpError e = tokenize(s, p.echoText, KILN_RT_TOKENIZE_ADD_SPECIAL,
                                 p.prompt))
        return sendError(res, e);
      if (p.prompt.empty())
        p.prompt.push_back(s.info.bos_id);
    } else if (one->is_array()) {
      for (const Json &x : *one) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
            x.get<int64_t>() >= s.info.vocab_size)
          return sendError(res, badRequest("'prompt' token ids must be "
                                           "integers in [0, " +
                                               std::to_string(s.info.vocab_size) +
                                               ")",
                                           "prompt"));
        p.prompt.push_back(int32_t(x.get<int64_t>()));
      }
      if (p.prompt.empty())
        return sendError(res, badRequest("'prompt' has no tokens", "prompt"));
      // The echoed text of the ids; a leading BOS has none.
      for (size_t i = 0; i < p.prompt.size(); ++i) {
        if (i == 0 && p.prompt[0] == s.info.bos_id)
          continue;
        p.echoText +=
            detokenize(s, i ? p.prompt[i - 1] : s.info.bos_id, p.prompt[i]);
      }
    } else {
      return sendError(res, typeError("prompt",
                                      "a string or an array of token ids",
                                      *prompt));
    }
    if (HttpError e = getBool(body, "echo", p.echo))
      return sendError(res, e);
    std::string suffix;
    bool given = false;
    if (HttpError e = getString(body, "suffix", suffix, given))
      return sendError(res, e);
    if (!suffix.empty())
      return sendError(res, badRequest("'suffix' is not supported", "suffix"));
  }
  if (HttpError e = readGenFields(s, body, chat, p))
    return sendError(res, e);
  if (chat)
    p.echo = false;
  if (p.echo && p.logprobs)
    return sendError(res, badRequest("'echo' with 'logprobs' is not "
                                     "supported (the prompt's log "
                                     "probabilities are not computed)",
                                     "echo"));

  const bool stream = p.stream;
  auto gen = std::make_shared<Generation>(
      s, std::move(p), s.newId(chat ? "chatcmpl-" : "cmpl-"), arrival);
  if (HttpError e = gen->submit())
    return sendError(res, e);
  int fd = findConnectionFd(req);
  if (stream)
    respondStream(s, gen, chat, fd, res);
  else
    respondWhole(s, gen, chat, fd, res);
}

void handleTokenize(Server &s, const httplib::Request &req,
                    httplib::Response &res) {
  Json body;
  if (HttpError e = parseBody(req, body))
    return sendError(res, e);
  bool addSpecial = true, given = false;
  std::vector<int32_t> tokens;
  if (field(body, "messages")) {
    bool addGen = true;
    if (HttpError e = getBool(body, "add_generation_prompt", addGen))
      return sendError(res, e);
    std::string text;
    if (HttpError e = renderChat(s, body, addGen, text))
      return sendError(res, e);
    if (HttpError e = tokenizeChat(s, text, tokens))
      return sendError(res, e);
  } else {
    std::string prompt;
    if (HttpError e = getString(body, "prompt", prompt, given))
      return sendError(res, e);
    if (!given)
      return sendError(res, badRequest("'prompt' (a string) or 'messages' is "
                                       "required",
                                       "prompt"));
    if (HttpError e = getBool(body, "add_special_tokens", addSpecial))
      return sendError(res, e);
    if (HttpError e = tokenize(
            s, prompt, addSpecial ? uint32_t(KILN_RT_TOKENIZE_ADD_SPECIAL) : 0u, tokens))
      return sendError(res, e);
  }
  sendJson(res, Json{{"tokens", tokens},
                     {"count", tokens.size()},
                     {"max_model_len", s.context}});
}

void handleDetokenize(Server &s, const httplib::Request &req,
                      httplib::Response &res) {
  Json body;
  if (HttpError e = parseBody(req, body))
    return sendError(res, e);
  const Json *tokens = field(body, "tokens");
  if (!tokens)
    return sendError(res, badRequest("'tokens' is required", "tokens"));
  if (!tokens->is_array())
    return sendError(res, typeError("tokens", "an array of token ids", *tokens));
  std::string text;
  int32_t prev = -1;
  for (const Json &x : *tokens) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
        x.get<int64_t>() >= s.info.vocab_size)
      return sendError(res, badRequest("'tokens' must hold token ids in [0, " +
                                           std::to_string(s.info.vocab_size) +
                                           ")",
                                       "tokens"));
    int32_t id = int32_t(x.get<int64_t>());
    text += detokenize(s, prev, id);
    prev = id;
  }
  sendJson(res, Json{{"prompt", text}});
}

std::string renderMetrics(Server &s) {
  kiln_rt_engine_stats_t st{};
  kiln_rt_engine_stats(s.engine, &st);
  const std::string label = "model_name=\"" + escapeLabel(s.modelName) + "\"";
  std::string out;
  auto head = [&](const std::string &name, const char *type, const char *help) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto sample = [&](const std::string &name, double v,
                    const std::string &extra = "") {
    out += name + "{" + label + extra + "} " + formatNumber(v) + "\n";
  };
  auto gauge = [&](const char *name, double v, const char *help) {
    head(name, "gauge", help);
    sample(name, v);
  };
  auto counter = [&](const char *name, double v, const char *help) {
    head(name, "counter", help);
    sample(name, v);
  };
  auto histogram = [&](const char *name, const Histogram &h,
                       const char *help) {
    head(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      sample(std::string(name) + "_bucket", double(cumulative),
             ",le=\"" + formatNumber(h.bounds[i]) + "\"");
    }
    sample(std::string(name) + "_bucket", double(h.count), ",le=\"+Inf\"");
    sample(std::string(name) + "_count", double(h.count));
    sample(std::string(name) + "_sum", h.sum);
  };
  const double usage = st.kv_blocks_total
                           ? double(st.kv_blocks_used) / double(st.kv_blocks_total)
                           : 0.0;
  gauge("vllm:num_requests_running", double(st.num_running),
        "Number of requests in model execution batches.");
  gauge("vllm:num_requests_waiting", double(st.num_waiting),
        "Number of requests waiting to be processed.");
  gauge("vllm:gpu_cache_usage_perc", usage,
        "KV-cache usage. 1 means 100 percent usage (the KV pool, also on CPU).");
  gauge("vllm:kv_cache_usage_perc", usage,
        "KV-cache usage. 1 means 100 percent usage.");
  gauge("kiln:kv_blocks_used", double(st.kv_blocks_used),
        "KV-cache blocks referenced by sequences.");
  gauge("kiln:kv_blocks_total", double(st.kv_blocks_total),
        "KV-cache blocks of the pool.");
  gauge("kiln:kv_block_tokens", double(st.block_tokens),
        "Token positions per KV-cache block.");
  counter("vllm:num_preemptions_total", double(st.num_preemptions),
          "Cumulative number of preemptions from the engine.");
  counter("vllm:prefix_cache_queries_total", double(st.prefix_cache_queries),
          "Prefix cache queries, in terms of number of queried tokens.");
  counter("vllm:prefix_cache_hits_total", double(st.prefix_cache_hits),
          "Prefix cache hits, in terms of number of cached tokens.");
  counter("kiln:prompt_tokens_computed_total", double(st.prompt_tokens),
          "Prompt tokens prefilled by the engine (prefix-cache hits excluded, "
          "recomputation after preemption included).");
  counter("kiln:engine_steps_total", double(st.steps),
          "Batched model steps run by the engine.");
  kiln_rt_speculative_stats_t spec{};
  kiln_rt_engine_speculative_stats(s.engine, &spec);
  counter("vllm:spec_decode_num_draft_tokens_total", double(spec.draft_tokens),
          "Speculative decoding: draft tokens verified.");
  counter("vllm:spec_decode_num_accepted_tokens_total",
          double(spec.accepted_tokens),
          "Speculative decoding: draft tokens accepted.");
  counter("kiln:spec_decode_verify_rows_total", double(spec.verify_rows),
          "Speculative decoding: decode rows that carried a draft.");
  Metrics &m = s.metrics;
  std::lock_guard<std::mutex> lock(m.mu);
  counter("vllm:prompt_tokens_total", double(m.promptTokens),
          "Number of prefill tokens processed.");
  counter("vllm:generation_tokens_total", double(m.generationTokens),
          "Number of generation tokens processed.");
  head("vllm:request_success_total", "counter",
       "Count of successfully processed requests.");
  for (const auto &kv : m.finished)
    sample("vllm:request_success_total", double(kv.second),
           ",finished_reason=\"" + kv.first + "\"");
  histogram("vllm:time_to_first_token_seconds", m.ttft,
            "Histogram of time to first token in seconds.");
  histogram("vllm:time_per_output_token_seconds", m.itl,
            "Histogram of time per output token in seconds (the gap between "
            "consecutive tokens; vLLM >= 0.11 calls it "
            "vllm:inter_token_latency_seconds).");
  histogram("vllm:inter_token_latency_seconds", m.itl,
            "Histogram of inter-token latency in seconds.");
  histogram("vllm:request_time_per_output_token_seconds", m.tpot,
            "Histogram of time_per_output_token_seconds per request.");
  histogram("vllm:e2e_request_latency_seconds", m.e2e,
            "Histogram of e2e request latency in seconds.");
  histogram("vllm:request_prompt_tokens", m.promptLen,
            "Number of prefill tokens processed.");
  histogram("vllm:request_generation_tokens", m.genLen,
            "Number of generation tokens processed.");
  return out;
}

/// Constant-time comparison of the bearer key.
bool keyMatches(const std::string &given, const std::string &key) {
  unsigned diff = given.size() != key.size();
  for (size_t i = 0; i < given.size(); ++i)
    diff |= unsigned((unsigned char)given[i] ^
                     (unsigned char)key[i % std::max<size_t>(key.size(), 1)]);
  return diff == 0;
}

bool needsKey(const std::string &path) {
  return path.rfind("/v1/", 0) == 0 || path == "/v1" || path == "/tokenize" ||
         path == "/detokenize";
}

void installRoutes(Server &s, httplib::Server &http) {
  http.set_pre_routing_handler([&s](const httplib::Request &req,
                                    httplib::Response &res) {
    if (s.key.empty() || !needsKey(req.path))
      return httplib::Server::HandlerResponse::Unhandled;
    std::string auth = req.get_header_value("Authorization");
    const std::string bearer = "Bearer ";
    if (auth.size() > bearer.size() &&
        strncasecmp(auth.c_str(), bearer.c_str(), bearer.size()) == 0 &&
        keyMatches(auth.substr(bearer.size()), s.key))
      return httplib::Server::HandlerResponse::Unhandled;
    sendError(res, HttpError{401,
                             auth.empty()
                                 ? "missing API key: send 'Authorization: "
                                   "Bearer KEY'"
                                 : "invalid API key",
                             "invalid_request_error", "", "invalid_api_key"});
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  http.Post("/v1/completions",
            [&s](const httplib::Request &req, httplib::Response &res) {
              handleGenerate(s, req, res, false);
            });
  http.Post("/v1/chat/completions",
            [&s](const httplib::Request &req, httplib::Response &res) {
              handleGenerate(s, req, res, true);
            });
  http.Get("/v1/models", [&s](const httplib::Request &, httplib::Response &res) {
    Json model = {{"id", s.modelName},          {"object", "model"},
                  {"created", s.created},       {"owned_by", "kiln"},
                  {"root", s.modelName},        {"parent", nullptr},
                  {"max_model_len", s.context}};
    sendJson(res, Json{{"object", "list"}, {"data", Json::array({model})}});
  });
  http.Get("/health", [&s](const httplib::Request &, httplib::Response &res) {
    if (s.engineFailed)
      return sendError(res, HttpError{503, "the engine stopped after a failed "
                                           "step",
                                      "server_error", "", ""});
    res.status = 200;
    res.set_content("", "text/plain");
  });
  http.Get("/version", [](const httplib::Request &, httplib::Response &res) {
    sendJson(res, Json{{"version", kiln::tool::kilnVersion().str()}});
  });
  http.Get("/metrics", [&s](const httplib::Request &, httplib::Response &res) {
    res.status = 200;
    res.set_content(renderMetrics(s), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Post("/tokenize", [&s](const httplib::Request &req,
                              httplib::Response &res) {
    handleTokenize(s, req, res);
  });
  http.Post("/detokenize", [&s](const httplib::Request &req,
                                httplib::Response &res) {
    handleDetokenize(s, req, res);
  });
  // Errors httplib produces itself (no route, body too large, bad request
  // line) in OpenAI's shape too.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [&s](const httplib::Request &req, httplib::Response &res) {
    if (!res.body.empty())
      return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    // A route that exists under another method: 405 with Allow.
    static const std::map<std::string, std::string> kRoutes = {
        {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
        {"/v1/models", "GET"},       {"/health", "GET"},
        {"/version", "GET"},         {"/metrics", "GET"},
        {"/tokenize", "POST"},       {"/detokenize", "POST"}};
    if (res.status == 404)
      if (auto it = kRoutes.find(req.path);
          it != kRoutes.end() && it->second != req.method) {
        res.status = 405;
        res.set_header("Allow", it->second);
      }
    if (res.status == 404)
      message = "no route for " + req.method + " " + req.path;
    else if (res.status == 413)
      message = "the request body is larger than " +
                std::to_string(s.maxBody) + " bytes (--max-body-bytes)";
    else if (res.status == 405)
      message = "method " + req.method + " is not allowed on " + req.path;
    else
      message = "HTTP status " + std::to_string(res.status);
    sendError(res, HttpError{res.status, message,
                             res.status >= 500 ? "server_error"
                                               : "invalid_request_error",
                             "", ""});
    return httplib::Server::HandlerResponse::Handled;
  }));
  if (logRequests)
    http.set_logger([](const httplib::Request &req,
                       const httplib::Response &res) {
      std::fprintf(stderr, "kiln-serve: %s %s -> %d\n", req.method.c_str(),
                   req.path.c_str(), res.status);
    });
}

} // namespace

/// Other servers' names for our flags (vLLM, llama-server), accepted as
/// they are.
static cl::alias maxNumSeqsAlias("max-num-seqs", cl::aliasopt(maxBatch),
                                 cl::desc("Alias for --max-batch (vLLM)"));
static cl::alias parallelAlias("parallel", cl::aliasopt(maxBatch),
                               cl::desc("Alias for --max-batch (llama-server)"));
static cl::alias npAlias("np", cl::aliasopt(maxBatch),
                         cl::desc("Alias for --max-batch (llama-server)"));
static cl::alias ctxSizeAlias("ctx-size", cl::aliasopt(maxModelLen),
                              cl::desc("Alias for --max-model-len "
                                       "(llama-server)"));
static cl::alias cAlias("c", cl::aliasopt(maxModelLen),
                        cl::desc("Alias for --max-model-len (llama-server)"));
static cl::alias gpuMemAlias("gpu-memory-utilization",
                             cl::aliasopt(kvCacheFraction),
                             cl::desc("Alias for --kv-cache-fraction (vLLM)"));
static cl::alias modelAlias("model", cl::aliasopt(servedModelName),
                            cl::desc("Alias for --served-model-name"));

/// Suggestions for mistyped flags.
static const kiln::tool::FlagAlias kServeAliases[] = {
    {"max-num-seqs", "max-batch"},
    {"np", "max-batch"},
    {"parallel", "max-batch"},
    {"model", "served-model-name"},
    {"gpu-memory-utilization", "kv-cache-fraction"},
    {"ctx-size", "max-model-len"},
    {"c", "max-model-len"}};

int main(int argc, char **argv) {
  kiln::tool::ToolMain tool(argc, argv, "kiln-serve",
                            kiln::tool::ToolKind::Runtime);
  cl::opt<int64_t> &threadCount = kiln::tool::threadsOption(serveCategory);
  cl::HideUnrelatedOptions(serveCategory);
  kiln::tool::parseCommandLine(
      argc, argv,
      "Kiln HTTP server: OpenAI-compatible completions and chat over the "
      "serving engine\n\n"
      "  Routes: POST /v1/completions, POST /v1/chat/completions, GET "
      "/v1/models,\n"
      "  GET /health, GET /metrics, GET /version, POST /tokenize, POST "
      "/detokenize.\n",
      kServeAliases);

  if (port < 0 || port > 65535)
    fail("--port must be in [0, 65535] (0: any free port), got " +
         std::to_string(port));
  if (maxBatch < 1 || maxBatch > 4096)
    fail("--max-batch must be in [1, 4096], got " + std::to_string(maxBatch));
  if (blockSize < 1 || blockSize > 1024)
    fail("--block-size must be in [1, 1024] tokens, got " +
         std::to_string(blockSize));
  if (ppMicroBatches < 0 || ppMicroBatches > 1024)
    fail("--pp-micro-batches must be in [0, 1024] (0: one per pipeline "
         "stage, 1: off), got " + std::to_string(ppMicroBatches));
  if (maxNumBatchedTokens < 0 || maxNumBatchedTokens > INT32_MAX)
    fail("--max-num-batched-tokens must be >= 1 (or 0 for the artifact's "
         "max prefill tokens), got " +
         std::to_string(maxNumBatchedTokens));
  if (maxQueue < 1 || maxQueue > (1 << 20))
    fail("--max-queue must be in [1, 1048576], got " + std::to_string(maxQueue));
  if (speculativeMode != "off" && speculativeMode != "ngram" &&
      speculativeMode != "suffix")
    fail("--speculative must be off, ngram or suffix, got '" +
         speculativeMode + "'");
  if (draftMax < 1 || draftMax > 32)
    fail("--draft-max must be in [1, 32] draft tokens, got " +
         std::to_string(draftMax));
  if (maxModelLen < 0)
    fail("--max-model-len must be >= 2 (or 0 for the compiled maximum), got " +
         std::to_string(maxModelLen));
  if (maxModelLen > INT32_MAX)
    fail("--max-model-len must be at most 2147483647 tokens, got " +
         std::to_string(maxModelLen));
  if (maxModelLen == 1)
    fail("--max-model-len must be >= 2 (a prompt token and a completion "
         "token), got 1");
  if (kvCacheFraction.getNumOccurrences() &&
      !(kvCacheFraction > 0.0 && kvCacheFraction <= 1.0))
    fail("--kv-cache-fraction must be in (0, 1], got " +
         std::to_string(kvCacheFraction));
  uint64_t kvBytes = 0;
  if (kvCacheBytes.getNumOccurrences()) {
    if (!parseBytes(kvCacheBytes, kvBytes) || kvBytes == 0)
      fail("--kv-cache-bytes: expected a positive size in bytes, optionally "
           "with a suffix K, M, G or T (e.g. 512M), got '" +
           kvCacheBytes + "'");
    if (kvCacheFraction.getNumOccurrences())
      fail("--kv-cache-bytes and --kv-cache-fraction are mutually exclusive");
  }
  uint64_t bodyLimit = 0;
  if (!parseBytes(maxBodyBytes, bodyLimit) || bodyLimit == 0)
    fail("--max-body-bytes: expected a positive size in bytes, optionally "
         "with a suffix K, M, G (e.g. 1M), got '" +
         maxBodyBytes + "'");
  if (bodyLimit > (uint64_t(1) << 30))
    fail("--max-body-bytes must be at most 1G (a request body is held in "
         "memory whole), got '" + maxBodyBytes + "'");
  if (httpThreads < 0 || httpThreads > 65536)
    fail("--http-threads must be in [1, 65536] (0: the default), got " +
         std::to_string(httpThreads));
  if (threadCount.getNumOccurrences() && (threadCount < 1 || threadCount > 4096))
    fail("--threads must be in [1, 4096], got " + std::to_string(threadCount));
  if (trustedKeys.getNumOccurrences() && trustedKeys.empty())
    fail("--trusted-keys needs a directory of *.pub keys or a key file");
  if (noVerify && !trustedKeys.empty())
    fail("--no-verify and --trusted-keys are mutually exclusive");
  if (apiKey.getNumOccurrences() && apiKey.empty())
    fail("--api-key needs a non-empty key");
  if (host.empty())
    fail("--host needs an address (127.0.0.1, or 0.0.0.0 for every "
         "interface)");
  if (servedModelName.getNumOccurrences() && servedModelName.empty())
    fail("--served-model-name needs a non-empty name");

  // SIGINT/SIGTERM go to one thread (sigwait) that stops the server; every
  // other thread, created after this, has them blocked. A client that went
  // away must not kill the server with SIGPIPE.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Server s;
  s.maxBody = bodyLimit;
  s.key = apiKey;
  if (s.key.empty())
    if (const char *env = std::getenv("KILN_API_KEY"))
      s.key = env;
  s.created = int64_t(std::time(nullptr));

  // One rank of an mpirun job (a partitioned artifact, docs/parallelism.md):
  // rank 0 serves HTTP, tokenizes and samples; the other ranks run its
  // engine's steps on their weight shards until it shuts down.
  int32_t rank = 0, ranks = 1;
  if (kiln_rt_parallel_launched())
    check(kiln_rt_parallel_init(&rank, &ranks));
  kiln_rt_open_options_t openOptions{};
  openOptions.flags = noVerify ? KILN_RT_OPEN_SKIP_CHECKSUMS : 0;
  openOptions.trusted_keys = trustedKeys.empty() ? nullptr : trustedKeys.c_str();
  check(kiln_rt_artifact_open_with_options(artifactDir.c_str(), &openOptions,
                                           &s.artifact));
  // Every rank refuses what the artifact's engine cannot do.
  {
    kiln_rt_model_info_t info{};
    kiln_rt_artifact_info(s.artifact, &info);
    if (speculativeMode != "off" &&
        (std::string(info.target) != "cpu" || ranks > 1))
      fail("--speculative runs on single-process cpu artifacts so far (the "
           "CUDA and tensor / pipeline parallel steps score no draft rows "
           "yet)");
  }
  // Ranks on one node share its cores (tools/common/Threads.h).
  const int rankThreads = ranks > 1 ? kiln::tool::applyThreads(
                                          threadCount,
                                          threadCount.getNumOccurrences() > 0)
                                    : 0;
  if (rank != 0) {
    // A follower has no HTTP to drain: SIGINT / SIGTERM end it at once (and
    // mpirun then the job), as for kiln-run's followers.
    pthread_sigmask(SIG_UNBLOCK, &stopSignals, nullptr);
    check(kiln_rt_parallel_follow(s.artifact));
    kiln_rt_artifact_release(s.artifact);
    kiln_rt_parallel_finalize();
    return 0;
  }
  kiln_rt_artifact_info(s.artifact, &s.info);
  kiln_rt_artifact_chat_info(s.artifact, &s.chat);
  s.endOfTurn.assign(s.chat.end_of_turn_ids,
                     s.chat.end_of_turn_ids + s.chat.n_end_of_turn_ids);
  s.modelName = servedModelName.getNumOccurrences() ? std::string(servedModelName)
                : s.info.name && *s.info.name ? std::string(s.info.name)
                                              : std::string("kiln");
  if (maxNumBatchedTokens > s.info.max_prefill_tokens)
    fail("--max-num-batched-tokens " + std::to_string(maxNumBatchedTokens) +
         " exceeds the artifact's step maximum of " +
         std::to_string(s.info.max_prefill_tokens) +
         " tokens (recompile with kiln-compile --max-prefill-tokens)");
  if (maxModelLen > s.info.max_seq_len)
    fail("--max-model-len " + std::to_string(maxModelLen) +
         " exceeds the artifact's compiled maximum context of " +
         std::to_string(s.info.max_seq_len) +
         " tokens (recompile with kiln-compile --max-seq-len)");

  std::string source, sourceName;
  if (!chatTemplateFile.empty()) {
    std::string error;
    if (!kiln::rt::readRegularFile(chatTemplateFile, kMaxChatTemplateBytes,
                                   "a chat template", source, error))
      fail("--chat-template " + error);
    sourceName = chatTemplateFile;
  } else if (s.chat.template_text) {
    source.assign(s.chat.template_text, s.chat.template_len);
    sourceName = std::string(artifactDir) + "/chat_template.jinja";
  }
  if (!sourceName.empty()) {
    auto tmpl = std::make_unique<kiln::chat::Template>();
    std::string error;
    if (!tmpl->parse(source, sourceName, error))
      fail("chat template: " + error);
    s.tmpl = std::move(tmpl);
  }

  kiln_rt_engine_options_t options{};
  options.kv_cache_bytes = kvBytes;
  options.kv_cache_fraction = kvCacheFraction;
  options.block_tokens = int32_t(blockSize);
  options.max_batch = int32_t(maxBatch);
  options.max_step_tokens = int32_t(maxNumBatchedTokens);
  options.max_queue = int32_t(maxQueue);
  options.context_length = int32_t(maxModelLen);
  options.threads = threadCount.getNumOccurrences() ? int32_t(threadCount)
                                                    : int32_t(rankThreads);
  options.flags =
      (noPrefixCaching ? uint32_t(KILN_RT_ENGINE_NO_PREFIX_CACHE) : 0u) |
      (batchInvariant ? uint32_t(KILN_RT_ENGINE_BATCH_INVARIANT) : 0u);
  options.pp_micro_batches = int32_t(ppMicroBatches);
  check(kiln_rt_engine_create(s.artifact, &options, &s.engine));

  kiln_rt_engine_stats_t stats{};
  kiln_rt_engine_stats(s.engine, &stats);
  s.context = stats.context_length;
  {
    Metrics &m = s.metrics;
    m.promptLen = Histogram(buckets125(s.context));
    m.genLen = Histogram(buckets125(s.context));
  }

  httplib::Server http;
  gHttp = &http;
  gServer = &s;
  const size_t workers =
      httpThreads ? size_t(httpThreads)
                  : std::max<size_t>(64, size_t(maxBatch + maxQueue + 16));
  http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  http.set_payload_max_length(size_t(bodyLimit));
  http.set_keep_alive_max_count(100000);
  http.set_tcp_nodelay(true);
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, with
  // which a second server binds a port already in use and the kernel splits
  // the connections between the two.
  http.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  installRoutes(s, http);

  int bound = 0;
  if (port == 0) {
    bound = http.bind_to_any_port(host);
    if (bound <= 0)
      fail("cannot listen on '" + host +
           "' (any port): not an address of this machine (--host)");
  } else {
    if (!http.bind_to_port(host, int(port)))
      fail("cannot listen on '" + host + "' port " + std::to_string(port) +
           ": the port is in use or the address is not one of this "
           "machine's (--host/--port)");
    bound = int(port);
  }

  // Pool size from the blocks and the session cache's bytes per position.
  const double bytesPerPosition =
      s.info.max_seq_len ? double(s.info.kv_cache_bytes) / double(s.info.max_seq_len)
                         : 0.0;
  const double poolMiB = double(stats.kv_blocks_total) *
                         double(stats.block_tokens) * bytesPerPosition /
                         (1024.0 * 1024.0);
  std::string hostShown = host.find(':') != std::string::npos
                              ? "[" + host + "]"
                              : std::string(host);
  std::fprintf(stderr,
               "kiln-serve: serving %s on http://%s:%d (max batch %lld, KV "
               "cache %.1f MiB in %lld blocks of %lld tokens, context %lld)\n",
               s.modelName.c_str(), hostShown.c_str(), bound,
               // The engine runs at most one sequence per budgeted token.
               (long long)std::min<int64_t>(
                   maxBatch, maxNumBatchedTokens ? int64_t(maxNumBatchedTokens)
                                                 : s.info.max_prefill_tokens),
               poolMiB, (long long)stats.kv_blocks_total,
               (long long)stats.block_tokens, (long long)s.context);
  std::fflush(stderr);

  std::atomic<bool> signalled{false}, listening{true};
  std::thread signals([&s, &http, &signalled, &listening, stopSignals] {
    int sig = 0;
    sigwait(&stopSignals, &sig);
    if (!listening)
      return; // woken by main after the server stopped by itself
    signalled = true;
    std::fprintf(stderr, "kiln-serve: %s: shutting down\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    {
      std::lock_guard<std::mutex> lock(s.regMu);
      s.stopping = true;
      for (uint64_t id : s.active)
        kiln_rt_engine_cancel(s.engine, id);
    }
    http.stop();
  });

  bool ok = http.listen_after_bind();
  listening = false;
  if (!signalled)
    pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  {
    std::lock_guard<std::mutex> lock(s.regMu);
    s.stopping = true;
  }
  kiln_rt_engine_release(s.engine);
  s.engine = nullptr;
  kiln_rt_artifact_release(s.artifact);
  s.artifact = nullptr;
  kiln_rt_parallel_finalize();
  if (!signalled)
    fail(ok ? "the HTTP server stopped unexpectedly"
            : "the HTTP server failed while listening");
  std::fprintf(stderr, "kiln-serve: stopped\n");
  return 0;
}
