//===- ChatTemplate.h - Chat templates (a Jinja2 subset) -----------*- C++ -*-===//
//
// Renders the chat templates that Hugging Face tokenizers and GGUF files carry
// (`tokenizer_config.json` "chat_template", GGUF `tokenizer.chat_template`):
// Jinja2 templates rendered the way transformers' `apply_chat_template` does
// (jinja2 ImmutableSandboxedEnvironment with trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False, the loopcontrols
// extension, and the globals raise_exception() and strftime_now(); `tojson`
// is json.dumps(..., ensure_ascii=False)).
//
// There is no Jinja library in Debian, so this is the subset those templates
// use (docs/chat.md lists it), in plain C++17 without LLVM:
//   {{ expr }}, {% stmt %}, {# comment #}, "-"/"+" whitespace control;
//   for (loop.index, index0, revindex, revindex0, first, last, length,
//   previtem, nextitem; "for a, b in x", "if" filter, else), if/elif/else,
//   set (names, namespace attributes, blocks), macro, break/continue,
//   generation; literals (strings, ints, floats, true/false/none, lists,
//   dicts, tuples), attribute and subscript access, slices, calls, filters,
//   tests, the Python operators Jinja2 has (+ - * / // % ** ~ == != < <= > >=
//   in, not in, and, or, not, "x if c else y") and the str/dict methods
//   templates call (strip, split, startswith, items, get, ...).
// Anything else is an error naming the template file, line and column.
//
// Values follow Python/Jinja2 semantics: str() of a value prints as Python
// does (True, None, 1.0, ['a']); an undefined name prints as "" and is false,
// an attribute of an undefined value is an error (jinja2.Undefined).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CHAT_CHATTEMPLATE_H
#define KILN_RUNTIME_CHAT_CHATTEMPLATE_H

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::chat {

class Value;
using ValueList = std::vector<Value>;
/// Insertion-ordered (as Python dicts are).
using ValueDict = std::vector<std::pair<Value, Value>>;

/// A template value: Python's None/bool/int/float/str/list/dict, Jinja2's
/// Undefined, a namespace() object, or a callable (builtin or macro).
class Value {
public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };
  using Function = std::function<Value(const std::vector<Value> &args,
                                       const std::vector<std::pair<std::string, Value>> &kwargs)>;

  Value() = default; ///< Undefined
  static Value none() { Value v; v.kind_ = Kind::None; return v; }
  static Value boolean(bool b) { Value v; v.kind_ = Kind::Bool; v.int_ = b; return v; }
  static Value integer(int64_t i) { Value v; v.kind_ = Kind::Int; v.int_ = i; return v; }
  static Value real(double f) { Value v; v.kind_ = Kind::Float; v.float_ = f; return v; }
  static Value string(std::string s) {
    Value v; v.kind_ = Kind::String; v.str_ = std::make_shared<std::string>(std::move(s)); return v;
  }
  static Value list(ValueList items = {}) {
    Value v; v.kind_ = Kind::List; v.list_ = std::make_shared<ValueList>(std::move(items));
    for (const Value &x : *v.list_)
      v.depth_ = std::max(v.depth_, x.depth_ + 1);
    return v;
  }
  static Value dict(ValueDict items = {}) {
    Value v; v.kind_ = Kind::Dict; v.dict_ = std::make_shared<ValueDict>(std::move(items));
    for (const auto &kv : *v.dict_)
      v.depth_ = std::max({v.depth_, kv.first.depth_ + 1, kv.second.depth_ + 1});
    return v;
  }
  /// A Python tuple: a list that prints as (a, b).
  static Value tuple(ValueList items) {
    Value v = list(std::move(items)); v.tuple_ = true; return v;
  }
  /// A Jinja2 namespace(): a dict whose attributes `set ns.x = ...` assigns.
  static Value namespaceObject(ValueDict items = {}) {
    Value v = dict(std::move(items)); v.namespace_ = true; return v;
  }
  static Value function(std::string name, Function fn) {
    Value v; v.kind_ = Kind::Callable;
    v.fn_ = std::make_shared<std::pair<std::string, Function>>(std::move(name), std::move(fn));
    return v;
  }
  /// Parses JSON text (objects keep their key order). Returns false and sets
  /// `error` ("line L column C: ...") on malformed JSON.
  static bool fromJson(const std::string &text, Value &out, std::string &error);

  Kind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == Kind::Undefined; }
  bool isNone() const { return kind_ == Kind::None; }
  bool isString() const { return kind_ == Kind::String; }
  bool isNumber() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool isList() const { return kind_ == Kind::List; }
  bool isDict() const { return kind_ == Kind::Dict; }
  bool isTuple() const { return kind_ == Kind::List && tuple_; }
  bool isNamespace() const { return kind_ == Kind::Dict && namespace_; }
  bool isCallable() const { return kind_ == Kind::Callable; }
  /// Nesting height: 0 for a scalar, 1 + the deepest item for a list or
  /// dict (as built by list()/dict()/set(); the template renderer bounds it
  /// so printing, comparing and destroying values cannot overflow the stack).
  uint32_t depth() const { return depth_; }

  bool asBool() const { return int_ != 0; }
  int64_t asInt() const { return int_; }
  double asFloat() const { return kind_ == Kind::Float ? float_ : double(int_); }
  const std::string &asString() const { return *str_; }
  ValueList &asList() const { return *list_; }
  ValueDict &asDict() const { return *dict_; }
  const std::string &functionName() const { return fn_->first; }
  const Function &asFunction() const { return fn_->second; }

  /// Dict lookup by key (string keys compare by content); nullptr if absent.
  const Value *find(const std::string &key) const;
  /// Sets dict[key] (keeps the position of an existing key).
  void set(const std::string &key, Value value);

private:
  Kind kind_ = Kind::Undefined;
  bool namespace_ = false;
  bool tuple_ = false;
  uint32_t depth_ = 0;
  int64_t int_ = 0; ///< Bool and Int
  double float_ = 0;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<std::pair<std::string, Function>> fn_;
};

struct Node;

/// A parsed template. Parse once, render many times; rendering does not
/// modify the template (const, but not thread-safe for concurrent renders
/// that share mutable Values).
class Template {
public:
  Template();
  ~Template();
  Template(Template &&) noexcept;
  Template &operator=(Template &&) noexcept;

  /// Parses `source`. `fileName` prefixes every error message
  /// ("FILE:LINE:COL: error text"). Returns false with `error` set on a
  /// syntax error or an unsupported construct, or on expressions or
  /// statement blocks nested more than 256 levels deep (a template is
  /// untrusted input: no stack overflow).
  bool parse(const std::string &source, const std::string &fileName,
             std::string &error);

  /// Renders with the variables of `context` (a dict: "messages",
  /// "add_generation_prompt", "bos_token", ...); raise_exception() and
  /// strftime_now() are always defined, as transformers defines them.
  /// Returns false with `error` set ("FILE:LINE:COL: ...") on an evaluation
  /// error or a raise_exception() call (its message follows "template
  /// raised: "). Rendering is bounded (docs/chat.md "Limits"): 64-bit
  /// integers are overflow-checked; strings are at most 64 MiB, lists
  /// 1,000,000 items and 1000 levels deep; a render has a budget of 10^7
  /// steps; blocks and macro calls nest at most 200 deep. Past a limit it
  /// returns false with a "FILE:LINE:COL: ..." error.
  bool render(const Value &context, std::string &out, std::string &error) const;

private:
  std::string fileName_;
  std::shared_ptr<Node> root_;
};

/// Python str() of `v` (what {{ v }} prints).
std::string toPythonString(const Value &v);
/// json.dumps(v, ensure_ascii=False) with `indent` < 0 meaning none.
std::string toJson(const Value &v, int indent = -1);

} // namespace kiln::chat

#endif // KILN_RUNTIME_CHAT_CHATTEMPLATE_H
