//===- ChatTemplate.cpp - Chat templates (a Jinja2 subset) ---------*- C++ -*-===//
//
// Lexer, parser and tree-walking evaluator for the Jinja2 subset described in
// ChatTemplate.h. The lexer follows jinja2/lexer.py (3.1) for whitespace:
// newlines normalised to "\n", one trailing newline dropped
// (keep_trailing_newline=False), "{%-"/"-%}" strip all whitespace,
// trim_blocks drops the first newline after a block or comment tag,
// lstrip_blocks drops spaces and tabs between the start of a line and a block
// or comment tag ("{%+" and "+%}" turn those off). The grammar and operator
// precedence follow jinja2/parser.py; values follow Python semantics.
//
//===----------------------------------------------------------------------===//
#include "chat/ChatTemplate.h"

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <optional>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <stdexcept>
#include <unordered_map>

namespace kiln::chat {

//===----------------------------------------------------------------------===//
// Value helpers
//===----------------------------------------------------------------------===//

const Value *Value::find(const std::string &key) const {
  if (kind_ != Kind::Dict)
    return nullptr;
  for (const auto &kv : *dict_)
    if (kv.first.isString() && kv.first.asString() == key)
      return &kv.second;
  return nullptr;
}

void Value::set(const std::string &key, Value value) {
  for (auto &kv : *dict_)
    if (kv.first.isString() && kv.first.asString() == key) {
      depth_ = std::max(depth_, value.depth_ + 1);
      kv.second = std::move(value);
      return;
    }
  depth_ = std::max(depth_, value.depth_ + 1);
  dict_->emplace_back(Value::string(key), std::move(value));
}

namespace {

/// An error at a template position; line 0 means "no position".
struct TemplateError {
  std::string message;
  int line = 0, col = 0;
};

[[noreturn]] void fail(const std::string &message, int line, int col) {
  throw TemplateError{message, line, col};
}

//--- Limits (a template is untrusted input) --------------------------------

/// Deepest nesting of expressions (parentheses, operators, calls) and of
/// statement blocks the parser accepts; deeper input is an error, not a
/// stack overflow.
constexpr int kMaxParseDepth = 256;
/// Deepest nesting of lists/dicts a template may build.
constexpr uint32_t kMaxValueDepth = 1000;
/// Largest string a template may build (the same cap as the rendered text).
constexpr size_t kMaxStringBytes = size_t(64) << 20;
/// Most items a template-built list (or an iterated string) may hold.
constexpr size_t kMaxListItems = 1000000;
/// Render work budget: one unit per statement, expression and list item
/// visited, kLoopIterationCost per loop iteration, one per 256 bytes of
/// string built or searched.
constexpr uint64_t kWorkBudget = 10000000;
/// Work units of one for-loop iteration (it builds the loop object).
constexpr uint64_t kLoopIterationCost = 10;

thread_local uint64_t tWork = 0;
/// Set while Template::render runs: the budget counts only renders (not
/// toPythonString/toJson called on their own).
thread_local bool tRendering = false;

/// Charges `units` of render work; fails when the budget is spent.
void charge(uint64_t units) {
  if (!tRendering)
    return;
  tWork += units;
  if (tWork > kWorkBudget)
    throw TemplateError{"template exceeds Kiln's render work budget (" +
                        std::to_string(kWorkBudget) +
                        " steps: statements, expressions, loop iterations, list items)"};
}

/// Fails unless a string of `bytes` bytes may be built.
void checkStringSize(uint64_t bytes) {
  if (bytes > kMaxStringBytes)
    throw TemplateError{"string value would exceed 64 MiB (Kiln's limit on a template value)"};
}

/// Charges building (copying) a string of `bytes` bytes.
void chargeBytes(uint64_t bytes) { charge(1 + bytes / 256); }

/// Fails unless a string of `bytes` bytes may be built; charges building it.
void newString(uint64_t bytes) {
  checkStringSize(bytes);
  chargeBytes(bytes);
}

/// Fails unless a list of `items` items may be built; charges its cost.
void checkListSize(uint64_t items) {
  if (items > kMaxListItems)
    throw TemplateError{"list value would exceed " + std::to_string(kMaxListItems) +
                        " items (Kiln's limit on a template value)"};
  charge(1 + items);
}

/// Charges a substring search of `needle` in `hay` by its worst case
/// (std::string::find is O(|hay| * |needle|)).
void chargeSearch(const std::string &hay, const std::string &needle) {
  charge(1 + (uint64_t(hay.size()) / 256) * (1 + uint64_t(needle.size()) / 256));
}

[[noreturn]] void integerOverflow() {
  throw TemplateError{"integer overflow: Kiln's templates use 64-bit integers "
                      "(Jinja2's are unbounded)"};
}
int64_t addInt(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    integerOverflow();
  return r;
}
int64_t subInt(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r))
    integerOverflow();
  return r;
}
int64_t mulInt(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    integerOverflow();
  return r;
}
int64_t negInt(int64_t a) { return subInt(0, a); }
/// a ** b for b >= 0 by repeated squaring, overflow-checked.
int64_t powInt(int64_t a, int64_t b) {
  int64_t r = 1;
  while (b > 0) {
    if (b & 1)
      r = mulInt(r, a);
    b >>= 1;
    if (b > 0)
      a = mulInt(a, a);
  }
  return r;
}
/// A float truncated to an int (Python int(x)); fails outside 64 bits.
int64_t floatToInt(double d) {
  if (std::isnan(d))
    throw TemplateError{"cannot convert float NaN to integer"};
  if (!(d > -9223372036854775808.0 - 1024 && d < 9223372036854775808.0))
    integerOverflow();
  if (d <= -9223372036854775808.0)
    return INT64_MIN;
  return int64_t(d);
}

//--- UTF-8 ------------------------------------------------------------------

/// Decodes the code point at s[i] (invalid bytes decode as themselves).
uint32_t decodeAt(const std::string &s, size_t i, size_t &len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + size_t(n) > s.size())
    n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    unsigned char d = static_cast<unsigned char>(s[i + size_t(k)]);
    if ((d & 0xc0) != 0x80) {
      len = 1;
      return c;
    }
    cp = (cp << 6) | (d & 0x3f);
  }
  len = size_t(n);
  return cp;
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

/// Byte offsets of each code point of `s`, plus s.size() at the end.
std::vector<size_t> codePointOffsets(const std::string &s) {
  chargeBytes(s.size());
  std::vector<size_t> at;
  for (size_t i = 0; i < s.size();) {
    at.push_back(i);
    size_t len = 1;
    decodeAt(s, i, len);
    i += len;
  }
  at.push_back(s.size());
  return at;
}

/// Python str.isspace() for one code point.
bool isPySpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 ||
         c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
         c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/// Python str.strip/lstrip/rstrip; `chars` null: whitespace.
std::string pyStrip(const std::string &s, const std::string *chars, bool left,
                    bool right) {
  std::vector<uint32_t> set;
  if (chars)
    for (size_t i = 0; i < chars->size();) {
      size_t len = 1;
      set.push_back(decodeAt(*chars, i, len));
      i += len;
    }
  auto strip = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : isPySpace(c);
  };
  std::vector<size_t> at = codePointOffsets(s);
  size_t b = 0, e = at.size() - 1;
  size_t len = 1;
  while (left && b < e && strip(decodeAt(s, at[b], len)))
    ++b;
  while (right && e > b && strip(decodeAt(s, at[e - 1], len)))
    --e;
  return s.substr(at[b], at[e] - at[b]);
}

/// Maps each code point of `s` through `f(cp, index)` (Unicode simple case
/// mappings from utf8proc); bytes that are not valid UTF-8 are kept as they
/// are.
template <typename F> std::string mapCodePoints(const std::string &s, F f) {
  chargeBytes(s.size());
  std::string out;
  out.reserve(s.size());
  size_t index = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    uint32_t cp = decodeAt(s, i, len);
    if (len == 1 && cp >= 0x80) {
      out += s[i]; // an invalid byte
    } else {
      utf8proc_int32_t m = f(utf8proc_int32_t(cp), index);
      appendUtf8(out, m >= 0 && m <= 0x10ffff ? uint32_t(m) : cp);
    }
    i += len;
    ++index;
  }
  return out;
}

/// Python str.lower()/str.upper() with Unicode simple case mappings
/// (UnicodeData.txt via utf8proc; Python also applies SpecialCasing.txt's
/// one-to-many mappings such as "ß".upper() == "SS", which this does not).
std::string mapCase(const std::string &s, int mode /*0 lower 1 upper*/) {
  if (mode && s.find("\xc3\x9f") != std::string::npos) {
    // SpecialCasing.txt's most common entry: "ß".upper() == "SS".
    std::string out;
    for (size_t b = 0;;) {
      size_t e = s.find("\xc3\x9f", b);
      out += mapCase(s.substr(b, e == std::string::npos ? std::string::npos : e - b), 1);
      if (e == std::string::npos)
        return out;
      out += "SS";
      b = e + 2;
    }
  }
  return mapCodePoints(s, [mode](utf8proc_int32_t c, size_t) {
    return mode ? utf8proc_toupper(c) : utf8proc_tolower(c);
  });
}

/// Python's "cased" characters (Lu, Ll, Lt).
bool isCased(utf8proc_int32_t c) {
  utf8proc_category_t cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
         cat == UTF8PROC_CATEGORY_LT;
}

//--- Python str() / repr() -------------------------------------------------

std::string floatRepr(double f) {
  if (std::isnan(f))
    return "nan";
  if (std::isinf(f))
    return f > 0 ? "inf" : "-inf";
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, f);
    if (std::strtod(buf, nullptr) == f)
      break;
  }
  // buf: [-]d.ddde[+-]XX
  std::string s = buf;
  bool neg = s[0] == '-';
  if (neg)
    s = s.substr(1);
  size_t epos = s.find('e');
  int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (s[i] != '.')
      digits += s[i];
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), size_t(exp) + 1));
      while (ip.size() < size_t(exp) + 1)
        ip += '0';
      std::string fp = digits.size() > size_t(exp) + 1 ? digits.substr(size_t(exp) + 1) : "0";
      out = ip + "." + fp;
    } else {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return neg ? "-" + out : out;
}

std::string stringRepr(const std::string &s) {
  bool hasSingle = s.find('\'') != std::string::npos;
  bool hasDouble = s.find('"') != std::string::npos;
  char q = hasSingle && !hasDouble ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += q;
  return out;
}

std::string repr(const Value &v);

std::string sequenceRepr(const Value &v) {
  std::string out = v.isTuple() ? "(" : "[";
  const ValueList &l = v.asList();
  for (size_t i = 0; i < l.size(); ++i) {
    out += (i ? ", " : "") + repr(l[i]);
    checkStringSize(out.size());
    charge(1);
  }
  if (v.isTuple() && l.size() == 1)
    out += ",";
  return out + (v.isTuple() ? ")" : "]");
}

std::string repr(const Value &v) {
  switch (v.kind()) {
  case Value::Kind::String:
    return stringRepr(v.asString());
  case Value::Kind::Undefined:
    return "Undefined";
  default:
    return toPythonString(v);
  }
}

} // namespace

std::string toPythonString(const Value &v) {
  switch (v.kind()) {
  case Value::Kind::Undefined:
    return "";
  case Value::Kind::None:
    return "None";
  case Value::Kind::Bool:
    return v.asBool() ? "True" : "False";
  case Value::Kind::Int:
    return std::to_string(v.asInt());
  case Value::Kind::Float:
    return floatRepr(v.asFloat());
  case Value::Kind::String:
    return v.asString();
  case Value::Kind::List:
    return sequenceRepr(v);
  case Value::Kind::Dict: {
    if (v.isNamespace())
      return "<Namespace>";
    std::string out = "{";
    bool first = true;
    for (const auto &kv : v.asDict()) {
      out += (first ? "" : ", ") + repr(kv.first) + ": " + repr(kv.second);
      checkStringSize(out.size());
    charge(1);
      first = false;
    }
    return out + "}";
  }
  case Value::Kind::Callable:
    return "<function " + v.functionName() + ">";
  }
  return "";
}

namespace {

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += ch;
      }
    }
  }
  return out + "\"";
}

void toJsonInto(const Value &v, int indent, int depth, std::string &out) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent * d), ' ');
  };
  switch (v.kind()) {
  case Value::Kind::None:
    out += "null";
    return;
  case Value::Kind::Bool:
    out += v.asBool() ? "true" : "false";
    return;
  case Value::Kind::Int:
    out += std::to_string(v.asInt());
    return;
  case Value::Kind::Float: {
    double f = v.asFloat();
    out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                                                 : floatRepr(f);
    return;
  }
  case Value::Kind::String:
    out += jsonString(v.asString());
    return;
  case Value::Kind::List: {
    const ValueList &l = v.asList();
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i)
        out += indent >= 0 ? "," : ", ";
      if (indent >= 0)
        newline(depth + 1);
      toJsonInto(l[i], indent, depth + 1, out);
      checkStringSize(out.size());
    charge(1);
    }
    if (indent >= 0)
      newline(depth);
    out += ']';
    return;
  }
  case Value::Kind::Dict: {
    if (v.isNamespace())
      throw TemplateError{"tojson: Object of type Namespace is not JSON serializable"};
    const ValueDict &d = v.asDict();
    if (d.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < d.size(); ++i) {
      if (i)
        out += indent >= 0 ? "," : ", ";
      if (indent >= 0)
        newline(depth + 1);
      const Value &k = d[i].first;
      if (k.isString())
        out += jsonString(k.asString());
      else if (k.kind() == Value::Kind::Int || k.kind() == Value::Kind::Float ||
               k.kind() == Value::Kind::Bool || k.isNone()) {
        std::string key;
        toJsonInto(k, -1, 0, key);
        out += "\"" + key + "\"";
      } else
        throw TemplateError{"tojson: keys must be str, int, float, bool or None"};
      out += ": ";
      toJsonInto(d[i].second, indent, depth + 1, out);
      checkStringSize(out.size());
    charge(1);
    }
    if (indent >= 0)
      newline(depth);
    out += '}';
    return;
  }
  case Value::Kind::Undefined:
    throw TemplateError{"tojson: Object of type Undefined is not JSON serializable"};
  case Value::Kind::Callable:
    throw TemplateError{"tojson: Object of type function is not JSON serializable"};
  }
}

} // namespace

std::string toJson(const Value &v, int indent) {
  std::string out;
  toJsonInto(v, indent, 0, out);
  return out;
}

namespace {

Value fromNlohmann(const nlohmann::ordered_json &j) {
  switch (j.type()) {
  case nlohmann::json::value_t::null:
    return Value::none();
  case nlohmann::json::value_t::boolean:
    return Value::boolean(j.get<bool>());
  case nlohmann::json::value_t::number_integer:
    return Value::integer(j.get<int64_t>());
  case nlohmann::json::value_t::number_unsigned:
    return Value::integer(int64_t(j.get<uint64_t>()));
  case nlohmann::json::value_t::number_float:
    return Value::real(j.get<double>());
  case nlohmann::json::value_t::string:
    return Value::string(j.get<std::string>());
  case nlohmann::json::value_t::array: {
    ValueList l;
    for (const auto &e : j)
      l.push_back(fromNlohmann(e));
    return Value::list(std::move(l));
  }
  case nlohmann::json::value_t::object: {
    ValueDict d;
    for (auto it = j.begin(); it != j.end(); ++it)
      d.emplace_back(Value::string(it.key()), fromNlohmann(it.value()));
    return Value::dict(std::move(d));
  }
  default:
    return Value();
  }
}

} // namespace

bool Value::fromJson(const std::string &text, Value &out, std::string &error) {
  try {
    out = fromNlohmann(nlohmann::ordered_json::parse(text));
    return true;
  } catch (const nlohmann::json::exception &e) {
    error = e.what();
    return false;
  }
}

//===----------------------------------------------------------------------===//
// Lexer
//===----------------------------------------------------------------------===//

namespace {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok kind;
  std::string text; ///< Text/Name/String value, Op spelling
  int64_t i = 0;
  double f = 0;
  int line = 0, col = 0;
};

class Lexer {
public:
  explicit Lexer(const std::string &src) : src_(src) {
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n')
        lineStarts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool lineStarting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t at = src_.find('{', pos);
      while (at != std::string::npos && at + 1 < n &&
             src_[at + 1] != '{' && src_[at + 1] != '%' && src_[at + 1] != '#')
        at = src_.find('{', at + 1);
      if (at == std::string::npos || at + 1 >= n) {
        emitText(src_.substr(pos), pos);
        break;
      }
      std::string text = src_.substr(pos, at - pos);
      char kind = src_[at + 1];
      size_t p = at + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+'))
        sign = src_[p++];
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && isPySpaceByte(text[e - 1]))
          --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if ((l > 0 || lineStarting) &&
            text.find_first_not_of(" \t", l) == std::string::npos)
          text.resize(l);
      }
      emitText(text, pos);
      if (kind == '#') {
        size_t e = src_.find("#}", p);
        if (e == std::string::npos)
          fail("unclosed comment: '{#' without '#}'", at);
        char before = e > p ? src_[e - 1] : 0;
        p = e + 2;
        p = afterTag(p, before == '-' ? '-' : before == '+' ? '+' : 0, true);
        lineStarting = p > 0 && src_[p - 1] == '\n';
        pos = p;
        continue;
      }
      bool block = kind == '%';
      tokens_.push_back(tok(block ? Tok::BlockBegin : Tok::VarBegin, block ? "{%" : "{{", at));
      p = lexTag(p, block, at);
      lineStarting = p > 0 && src_[p - 1] == '\n';
      pos = p;
    }
    tokens_.push_back(tok(Tok::Eof, "", n));
    return std::move(tokens_);
  }

  void position(size_t offset, int &line, int &col) const {
    auto it = std::upper_bound(lineStarts_.begin(), lineStarts_.end(), offset);
    line = int(it - lineStarts_.begin());
    col = int(offset - lineStarts_[size_t(line - 1)]) + 1;
  }

private:
  static bool isPySpaceByte(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  }

  [[noreturn]] void fail(const std::string &msg, size_t offset) const {
    int line, col;
    position(offset, line, col);
    throw TemplateError{msg, line, col};
  }

  Token tok(Tok kind, std::string text, size_t offset) const {
    Token t{kind, std::move(text)};
    position(offset, t.line, t.col);
    return t;
  }

  void emitText(const std::string &text, size_t offset) {
    if (!text.empty())
      tokens_.push_back(tok(Tok::Text, text, offset));
  }

  /// Whitespace after a tag end at `p`: "-" strips all, trim_blocks one "\n".
  size_t afterTag(size_t p, char sign, bool trimBlocks) const {
    if (sign == '-') {
      while (p < src_.size() && isPySpaceByte(src_[p]))
        ++p;
    } else if (sign != '+' && trimBlocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  /// Lexes expression tokens from `p` to the end of the tag; returns the
  /// offset after the tag and its trailing whitespace handling.
  size_t lexTag(size_t p, bool block, size_t tagStart) {
    const size_t n = src_.size();
    const char *endTag = block ? "%}" : "}}";
    // As jinja2's lexer: no tag end while a bracket is open ("{'a': {}}}").
    std::string brackets;
    for (;;) {
      while (p < n && isPySpaceByte(src_[p]))
        ++p;
      if (p >= n)
        fail(std::string("unclosed tag: '") + (block ? "{%" : "{{") +
                 "' without '" + endTag + "'",
             tagStart);
      if (brackets.empty() && src_.compare(p, 3, std::string("-") + endTag) == 0) {
        tokens_.push_back(tok(block ? Tok::BlockEnd : Tok::VarEnd, endTag, p));
        return afterTag(p + 3, '-', block);
      }
      if (brackets.empty() && block && src_.compare(p, 3, "+%}") == 0) {
        tokens_.push_back(tok(Tok::BlockEnd, endTag, p));
        return p + 3;
      }
      if (brackets.empty() && src_.compare(p, 2, endTag) == 0) {
        tokens_.push_back(tok(block ? Tok::BlockEnd : Tok::VarEnd, endTag, p));
        return afterTag(p + 2, 0, block);
      }
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = p;
        while (p < n && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
          ++p;
        tokens_.push_back(tok(Tok::Name, src_.substr(b, p - b), b));
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = p;
        while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
          ++p;
        bool isFloat = false;
        if (p + 1 < n && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
          isFloat = true;
          ++p;
          while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
            ++p;
        }
        if (p < n && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < n && (src_[q] == '+' || src_[q] == '-'))
            ++q;
          if (q < n && std::isdigit(static_cast<unsigned char>(src_[q]))) {
            isFloat = true;
            p = q;
            while (p < n && std::isdigit(static_cast<unsigned char>(src_[p])))
              ++p;
          }
        }
        std::string num;
        for (size_t i = b; i < p; ++i)
          if (src_[i] != '_')
            num += src_[i];
        Token t = tok(isFloat ? Tok::Float : Tok::Int, num, b);
        errno = 0;
        if (isFloat)
          t.f = std::strtod(num.c_str(), nullptr);
        else
          t.i = std::strtoll(num.c_str(), nullptr, 10);
        if (errno)
          fail("number literal " + num + " is out of range", b);
        tokens_.push_back(t);
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t b = p++;
        std::string value;
        for (;;) {
          if (p >= n)
            fail("unterminated string literal", b);
          char d = src_[p];
          if (d == c) {
            ++p;
            break;
          }
          if (d != '\\') {
            value += d;
            ++p;
            continue;
          }
          if (p + 1 >= n)
            fail("unterminated string literal", b);
          char e = src_[p + 1];
          p += 2;
          switch (e) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case '0': value += '\0'; break;
          case 'a': value += '\a'; break;
          case 'b': value += '\b'; break;
          case 'f': value += '\f'; break;
          case 'v': value += '\v'; break;
          case '\\': value += '\\'; break;
          case '\'': value += '\''; break;
          case '"': value += '"'; break;
          case '\n': break;
          case 'x': case 'u': case 'U': {
            size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (p + digits > n)
              fail(std::string("truncated \\") + e + " escape in string literal", p - 2);
            uint32_t cp = 0;
            for (size_t k = 0; k < digits; ++k) {
              char h = src_[p + k];
              if (!std::isxdigit(static_cast<unsigned char>(h)))
                fail(std::string("bad \\") + e + " escape in string literal", p - 2);
              cp = cp * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h))
                                          ? h - '0'
                                          : std::tolower(h) - 'a' + 10);
            }
            if (cp > 0x10ffff)
              fail("escape beyond U+10FFFF in string literal", p - 2);
            appendUtf8(value, cp);
            p += digits;
            break;
          }
          default: // Python keeps unknown escapes as written
            value += '\\';
            value += e;
          }
        }
        tokens_.push_back(tok(Tok::String, value, b));
        continue;
      }
      static const char *ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                  "]",  "{",  "}",  ".",  ",",  ":",  "|"};
      bool matched = false;
      for (const char *op : ops) {
        size_t len = std::strlen(op);
        if (src_.compare(p, len, op) == 0) {
          if (len == 1 && std::strchr("([{", *op)) {
            brackets += *op;
          } else if (len == 1 && std::strchr(")]}", *op)) {
            char want = *op == ')' ? '(' : *op == ']' ? '[' : '{';
            if (brackets.empty() || brackets.back() != want)
              fail(std::string("unexpected '") + op + "'" +
                       (brackets.empty() ? std::string()
                                         : std::string(" (expected the match of '") +
                                               brackets.back() + "')"),
                   p);
            brackets.pop_back();
          }
          tokens_.push_back(tok(Tok::Op, op, p));
          p += len;
          matched = true;
          break;
        }
      }
      if (!matched)
        fail(std::string("unexpected character '") + c + "' in tag", p);
    }
  }

  const std::string &src_;
  std::vector<size_t> lineStarts_{0};
  std::vector<Token> tokens_;
};

//===----------------------------------------------------------------------===//
// AST
//===----------------------------------------------------------------------===//

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  enum Kind {
    Literal, Name, ListLit, TupleLit, DictLit, Attr, Subscript, Slice, Call,
    Filter, Test, Neg, Pos, Not, And, Or, Binary, Compare, Cond
  } kind;
  int line = 0, col = 0;
  Value literal;
  std::string name;              ///< Name, Attr, Filter, Test, Binary op
  std::vector<ExprPtr> args;     ///< operands / positional args / items
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  ///< Compare operators
  bool negated = false;          ///< Test: "is not"
  int depth = 1;                 ///< height of this expression tree
};

} // namespace

struct Node {
  enum Kind { Body, Text, Output, If, For, Set, SetBlock, Macro, Break, Continue } kind;
  int line = 0, col = 0;
  std::string text;                       ///< Text
  ExprPtr expr;                           ///< Output, Set value, For iterable
  std::vector<std::shared_ptr<Node>> children; ///< Body
  std::vector<std::pair<ExprPtr, std::shared_ptr<Node>>> branches; ///< If
  std::shared_ptr<Node> body, elseBody;   ///< For, SetBlock, Macro, If else
  std::vector<std::string> targets;       ///< For/Set names, Macro params
  std::string attr;                       ///< Set ns.attr
  ExprPtr filter;                         ///< For "if" filter
  std::vector<ExprPtr> defaults;          ///< Macro parameter defaults (null: none)
  std::string name;                       ///< Macro name
};

namespace {

using NodePtr = std::shared_ptr<Node>;

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//

/// The filters and tests Renderer implements (checked at parse time, as
/// jinja2 does when it compiles a template).
const char *const kFilters[] = {
    "trim", "length", "count", "upper", "lower", "title", "capitalize", "string", "safe",
    "e", "escape", "tojson", "default", "d", "first", "last", "join", "items", "list",
    "reverse", "replace", "int", "float", "abs", "min", "max", "sum", "unique", "indent",
    "select", "reject", "selectattr", "rejectattr", "map", "dictsort", nullptr};
const char *const kTests[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
    "true", "false", "mapping", "sequence", "iterable", "callable", "lower", "upper",
    "odd", "even", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan",
    "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas", nullptr};

bool isKnown(const char *const *names, const std::string &name) {
  for (; *names; ++names)
    if (name == *names)
      return true;
  return false;
}

class Parser {
public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  NodePtr parseTemplate() {
    std::string endedBy;
    NodePtr body = parseBody({}, endedBy);
    return body;
  }

private:
  const Token &peek(size_t k = 0) const {
    return toks_[std::min(pos_ + k, toks_.size() - 1)];
  }
  const Token &next() {
    const Token &t = toks_[pos_];
    if (pos_ + 1 < toks_.size())
      ++pos_;
    return t;
  }
  bool isOp(const char *op, size_t k = 0) const {
    return peek(k).kind == Tok::Op && peek(k).text == op;
  }
  bool isName(const char *name, size_t k = 0) const {
    return peek(k).kind == Tok::Name && peek(k).text == name;
  }
  [[noreturn]] void failAt(const Token &t, const std::string &msg) const {
    fail(msg, t.line, t.col);
  }
  static std::string describe(const Token &t) {
    switch (t.kind) {
    case Tok::Eof: return "end of template";
    case Tok::BlockEnd: return "end of statement block '%}'";
    case Tok::VarEnd: return "end of print statement '}}'";
    case Tok::String: return "string " + stringRepr(t.text);
    case Tok::Text: return "template text";
    default: return "'" + t.text + "'";
    }
  }
  void expectOp(const char *op) {
    if (!isOp(op))
      failAt(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    next();
  }
  std::string expectName() {
    if (peek().kind != Tok::Name)
      failAt(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expectBlockEnd() {
    if (peek().kind != Tok::BlockEnd)
      failAt(peek(), "expected end of statement block '%}', got " + describe(peek()));
    next();
  }

  ExprPtr make(Expr::Kind k, const Token &at) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  NodePtr makeNode(Node::Kind k, const Token &at) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  /// Parses nodes until a "{% NAME" with NAME in `ends` (left unconsumed
  /// after the "{%"; its name goes to `endedBy`) or the end of the template.
  NodePtr parseBody(const std::vector<std::string> &ends, std::string &endedBy) {
    Nest nest(*this, peek(), "statement blocks");
    NodePtr body = makeNode(Node::Body, peek());
    for (;;) {
      const Token &t = peek();
      if (t.kind == Tok::Eof) {
        if (!ends.empty()) {
          std::string list;
          for (size_t i = 0; i < ends.size(); ++i)
            list += (i ? " or '" : "'") + ends[i] + "'";
          failAt(t, "unexpected end of template: expected " + list + " to close '" +
                        openTag_.back() + "' at line " + std::to_string(openLine_.back()));
        }
        return body;
      }
      if (t.kind == Tok::Text) {
        NodePtr n = makeNode(Node::Text, t);
        n->text = next().text;
        body->children.push_back(n);
        continue;
      }
      if (t.kind == Tok::VarBegin) {
        next();
        NodePtr n = makeNode(Node::Output, t);
        n->expr = parseTuple(true);
        if (peek().kind != Tok::VarEnd)
          failAt(peek(), "expected end of print statement '}}', got " + describe(peek()));
        next();
        body->children.push_back(n);
        continue;
      }
      if (t.kind != Tok::BlockBegin)
        failAt(t, "unexpected " + describe(t));
      const Token &nameTok = peek(1);
      if (nameTok.kind != Tok::Name)
        failAt(nameTok, "expected a statement name after '{%', got " + describe(nameTok));
      if (std::find(ends.begin(), ends.end(), nameTok.text) != ends.end()) {
        next();
        next();
        endedBy = nameTok.text;
        return body;
      }
      next();
      body->children.push_back(parseStatement());
    }
  }

  NodePtr parseStatement() {
    const Token &t = next(); // statement name
    const std::string &s = t.text;
    if (s == "if")
      return parseIf(t);
    if (s == "for")
      return parseFor(t);
    if (s == "set")
      return parseSet(t);
    if (s == "macro")
      return parseMacro(t);
    if (s == "break" || s == "continue") {
      if (loopDepth_ == 0)
        failAt(t, "'" + s + "' outside of a for loop");
      expectBlockEnd();
      return makeNode(s == "break" ? Node::Break : Node::Continue, t);
    }
    if (s == "generation") { // transformers' AssistantTracker: renders its body
      expectBlockEnd();
      open(t);
      std::string endedBy;
      NodePtr body = parseBody({"endgeneration"}, endedBy);
      close();
      expectBlockEnd();
      return body;
    }
    static const char *known[] = {"endif", "endfor", "endset", "endmacro", "else", "elif",
                                  "endgeneration"};
    for (const char *k : known)
      if (s == k)
        failAt(t, "unexpected '" + s + "'" +
                      (openTag_.empty() ? std::string(" (no open block)")
                                        : " inside '" + openTag_.back() + "' opened at line " +
                                              std::to_string(openLine_.back())));
    failAt(t, "unsupported statement '" + s +
                  "' (Kiln's chat templates support if, for, set, macro, break, continue, "
                  "generation)");
  }

  void open(const Token &t) {
    openTag_.push_back(t.text);
    openLine_.push_back(t.line);
  }
  void close() {
    openTag_.pop_back();
    openLine_.pop_back();
  }

  NodePtr parseIf(const Token &t) {
    NodePtr n = makeNode(Node::If, t);
    open(t);
    ExprPtr cond = parseTuple(false);
    expectBlockEnd();
    for (;;) {
      std::string endedBy;
      NodePtr body = parseBody({"elif", "else", "endif"}, endedBy);
      n->branches.emplace_back(cond, body);
      if (endedBy == "elif") {
        cond = parseTuple(false);
        expectBlockEnd();
        continue;
      }
      if (endedBy == "else") {
        expectBlockEnd();
        n->elseBody = parseBody({"endif"}, endedBy);
      }
      break;
    }
    close();
    expectBlockEnd();
    return n;
  }

  void parseTargets(std::vector<std::string> &targets) {
    bool paren = isOp("(");
    if (paren)
      next();
    targets.push_back(expectName());
    while (isOp(",")) {
      next();
      if (peek().kind != Tok::Name)
        break;
      targets.push_back(expectName());
    }
    if (paren)
      expectOp(")");
  }

  NodePtr parseFor(const Token &t) {
    NodePtr n = makeNode(Node::For, t);
    open(t);
    parseTargets(n->targets);
    if (!isName("in"))
      failAt(peek(), "expected 'in' in for loop, got " + describe(peek()));
    next();
    n->expr = parseTuple(false);
    if (isName("if")) {
      next();
      n->filter = parseTuple(false);
    }
    if (isName("recursive"))
      failAt(peek(), "unsupported: recursive for loops");
    expectBlockEnd();
    ++loopDepth_;
    std::string endedBy;
    n->body = parseBody({"else", "endfor"}, endedBy);
    --loopDepth_;
    if (endedBy == "else") {
      expectBlockEnd();
      n->elseBody = parseBody({"endfor"}, endedBy);
    }
    close();
    expectBlockEnd();
    return n;
  }

  NodePtr parseSet(const Token &t) {
    if (peek().kind == Tok::Name && isOp(".", 1)) {
      NodePtr n = makeNode(Node::Set, t);
      n->targets.push_back(next().text);
      next();
      n->attr = expectName();
      expectOp("=");
      n->expr = parseTuple(true);
      expectBlockEnd();
      return n;
    }
    std::vector<std::string> targets;
    parseTargets(targets);
    if (isOp("=")) {
      next();
      NodePtr n = makeNode(Node::Set, t);
      n->targets = targets;
      n->expr = parseTuple(true);
      expectBlockEnd();
      return n;
    }
    if (targets.size() != 1)
      failAt(peek(), "expected '=' after the names of 'set'");
    expectBlockEnd();
    NodePtr n = makeNode(Node::SetBlock, t);
    n->targets = targets;
    open(t);
    std::string endedBy;
    n->body = parseBody({"endset"}, endedBy);
    close();
    expectBlockEnd();
    return n;
  }

  NodePtr parseMacro(const Token &t) {
    NodePtr n = makeNode(Node::Macro, t);
    n->name = expectName();
    expectOp("(");
    while (!isOp(")")) {
      n->targets.push_back(expectName());
      ExprPtr def;
      if (isOp("=")) {
        next();
        def = parseExpression(true);
      }
      n->defaults.push_back(def);
      if (!isOp(","))
        break;
      next();
    }
    expectOp(")");
    expectBlockEnd();
    open(t);
    int saved = loopDepth_;
    loopDepth_ = 0;
    std::string endedBy;
    n->body = parseBody({"endmacro"}, endedBy);
    loopDepth_ = saved;
    close();
    expectBlockEnd();
    return n;
  }

  //--- expressions (jinja2/parser.py) ----------------------------------------

  /// parse_tuple: expr or "a, b" (a tuple without parentheses).
  ExprPtr parseTuple(bool withCondexpr) {
    const Token &t = peek();
    ExprPtr first = parseExpression(withCondexpr);
    if (!isOp(","))
      return first;
    ExprPtr tuple = make(Expr::TupleLit, t);
    tuple->args.push_back(first);
    while (isOp(",")) {
      next();
      if (peek().kind == Tok::BlockEnd || peek().kind == Tok::VarEnd || isOp(")"))
        break;
      tuple->args.push_back(parseExpression(withCondexpr));
    }
    return seal(tuple);
  }

  ExprPtr parseExpression(bool withCondexpr = true) {
    Nest nest(*this, peek(), "expression");
    return withCondexpr ? parseCondexpr() : parseOr();
  }

  ExprPtr parseCondexpr() {
    ExprPtr e = parseOr();
    while (isName("if")) {
      const Token &t = next();
      ExprPtr cond = parseOr();
      ExprPtr other;
      if (isName("else")) {
        Nest nest(*this, next(), "expression");
        other = parseCondexpr();
      }
      ExprPtr c = make(Expr::Cond, t);
      c->args = {cond, e, other};
      e = seal(c);
    }
    return e;
  }

  ExprPtr parseOr() {
    ExprPtr e = parseAnd();
    while (isName("or")) {
      const Token &t = next();
      ExprPtr o = make(Expr::Or, t);
      o->args = {e, parseAnd()};
      e = seal(o);
    }
    return e;
  }

  ExprPtr parseAnd() {
    ExprPtr e = parseNot();
    while (isName("and")) {
      const Token &t = next();
      ExprPtr a = make(Expr::And, t);
      a->args = {e, parseNot()};
      e = seal(a);
    }
    return e;
  }

  ExprPtr parseNot() {
    if (isName("not")) {
      const Token &t = next();
      Nest nest(*this, t, "expression");
      ExprPtr n = make(Expr::Not, t);
      n->args = {parseNot()};
      return seal(n);
    }
    return parseCompare();
  }

  ExprPtr parseCompare() {
    const Token &t = peek();
    ExprPtr e = parseMath1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (peek().kind == Tok::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (isName("in")) {
        next();
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Compare, t);
        cmp->args.push_back(e);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parseMath1());
    }
    return cmp ? seal(cmp) : e;
  }

  ExprPtr binary(const Token &t, const std::string &op, ExprPtr a, ExprPtr b) {
    ExprPtr e = make(Expr::Binary, t);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return seal(e);
  }

  ExprPtr parseMath1() {
    ExprPtr e = parseConcat();
    while (isOp("+") || isOp("-")) {
      const Token &t = next();
      e = binary(t, t.text, e, parseConcat());
    }
    return e;
  }

  ExprPtr parseConcat() {
    ExprPtr e = parseMath2();
    while (isOp("~")) {
      const Token &t = next();
      e = binary(t, "~", e, parseMath2());
    }
    return e;
  }

  ExprPtr parseMath2() {
    ExprPtr e = parsePow();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      const Token &t = next();
      e = binary(t, t.text, e, parsePow());
    }
    return e;
  }

  ExprPtr parsePow() {
    ExprPtr e = parseUnary(true);
    while (isOp("**")) {
      const Token &t = next();
      e = binary(t, "**", e, parseUnary(true));
    }
    return e;
  }

  ExprPtr parseUnary(bool withFilter) {
    ExprPtr e;
    if (isOp("-") || isOp("+")) {
      const Token &t = next();
      Nest nest(*this, t, "expression");
      e = make(t.text == "-" ? Expr::Neg : Expr::Pos, t);
      e->args = {parseUnary(false)};
      e = seal(e);
    } else {
      e = parsePrimary();
    }
    e = parsePostfix(e);
    if (withFilter)
      e = parseFilterExpr(e);
    return e;
  }

  ExprPtr parsePrimary() {
    const Token &t = peek();
    if (t.kind == Tok::Name) {
      next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        ExprPtr e = make(Expr::Literal, t);
        e->literal = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
        return e;
      }
      if (t.text == "none" || t.text == "None") {
        ExprPtr e = make(Expr::Literal, t);
        e->literal = Value::none();
        return e;
      }
      ExprPtr e = make(Expr::Name, t);
      e->name = t.text;
      return e;
    }
    if (t.kind == Tok::String) {
      std::string s;
      while (peek().kind == Tok::String)
        s += next().text;
      ExprPtr e = make(Expr::Literal, t);
      e->literal = Value::string(s);
      return e;
    }
    if (t.kind == Tok::Int || t.kind == Tok::Float) {
      next();
      ExprPtr e = make(Expr::Literal, t);
      e->literal = t.kind == Tok::Int ? Value::integer(t.i) : Value::real(t.f);
      return e;
    }
    if (isOp("(")) {
      next();
      if (isOp(")")) {
        next();
        return make(Expr::TupleLit, t);
      }
      ExprPtr e = parseExpression(true);
      if (isOp(",")) {
        ExprPtr tuple = make(Expr::TupleLit, t);
        tuple->args.push_back(e);
        while (isOp(",")) {
          next();
          if (isOp(")"))
            break;
          tuple->args.push_back(parseExpression(true));
        }
        e = seal(tuple);
      }
      expectOp(")");
      return e;
    }
    if (isOp("[")) {
      next();
      ExprPtr e = make(Expr::ListLit, t);
      while (!isOp("]")) {
        e->args.push_back(parseExpression(true));
        if (!isOp(","))
          break;
        next();
      }
      expectOp("]");
      return seal(e);
    }
    if (isOp("{")) {
      next();
      ExprPtr e = make(Expr::DictLit, t);
      while (!isOp("}")) {
        e->args.push_back(parseExpression(true));
        expectOp(":");
        e->args.push_back(parseExpression(true));
        if (!isOp(","))
          break;
        next();
      }
      expectOp("}");
      return seal(e);
    }
    failAt(t, "expected an expression, got " + describe(t));
  }

  ExprPtr parsePostfix(ExprPtr e) {
    for (;;) {
      if (isOp(".")) {
        const Token &t = next();
        ExprPtr a = make(Expr::Attr, t);
        if (peek().kind == Tok::Int) { // foo.0 is foo[0]
          ExprPtr idx = make(Expr::Literal, peek());
          idx->literal = Value::integer(next().i);
          a->kind = Expr::Subscript;
          a->args = {e, idx};
        } else {
          a->name = expectName();
          a->args = {e};
        }
        e = seal(a);
      } else if (isOp("[")) {
        const Token &t = next();
        e = parseSubscript(t, e);
      } else if (isOp("(")) {
        e = parseCall(e);
      } else {
        return e;
      }
    }
  }

  ExprPtr parseSubscript(const Token &t, ExprPtr obj) {
    ExprPtr parts[3];
    bool slice = false;
    int k = 0;
    for (;;) {
      if (isOp("]"))
        break;
      if (isOp(":")) {
        slice = true;
        next();
        if (++k > 2)
          failAt(peek(), "a slice has at most three parts");
        continue;
      }
      if (parts[k])
        failAt(peek(), "expected ':' or ']' in subscript, got " + describe(peek()));
      parts[k] = parseExpression(true);
    }
    expectOp("]");
    if (!slice) {
      if (!parts[0])
        failAt(t, "empty subscript");
      ExprPtr s = make(Expr::Subscript, t);
      s->args = {obj, parts[0]};
      return seal(s);
    }
    ExprPtr s = make(Expr::Slice, t);
    s->args = {obj, parts[0], parts[1], parts[2]};
    return seal(s);
  }

  void parseArgs(ExprPtr call) {
    expectOp("(");
    while (!isOp(")")) {
      if (peek().kind == Tok::Name && isOp("=", 1)) {
        std::string key = next().text;
        next();
        call->kwargs.emplace_back(key, parseExpression(true));
      } else {
        if (!call->kwargs.empty())
          failAt(peek(), "positional argument after keyword argument");
        call->args.push_back(parseExpression(true));
      }
      if (!isOp(","))
        break;
      next();
    }
    expectOp(")");
  }

  ExprPtr parseCall(ExprPtr fn) {
    ExprPtr c = make(Expr::Call, peek());
    c->args.push_back(fn);
    parseArgs(c);
    return seal(c);
  }

  ExprPtr parseFilterExpr(ExprPtr e) {
    for (;;) {
      if (isOp("|")) {
        next();
        const Token &t = peek();
        ExprPtr f = make(Expr::Filter, t);
        f->name = expectName();
        if (!isKnown(kFilters, f->name))
          failAt(t, "unknown filter '" + f->name + "'");
        f->args.push_back(e);
        if (isOp("("))
          parseArgs(f);
        e = seal(f);
      } else if (isName("is")) {
        next();
        const Token &t = peek();
        ExprPtr te = make(Expr::Test, t);
        if (isName("not")) {
          next();
          te->negated = true;
        }
        const Token &nameTok = peek();
        if (nameTok.kind == Tok::Name)
          te->name = next().text;
        else if (nameTok.kind == Tok::Op &&
                 (nameTok.text == "==" || nameTok.text == "!=" || nameTok.text == "<" ||
                  nameTok.text == ">" || nameTok.text == "<=" || nameTok.text == ">="))
          te->name = next().text;
        else
          failAt(nameTok, "expected a test name after 'is', got " + describe(nameTok));
        if (!isKnown(kTests, te->name))
          failAt(nameTok, "unknown test '" + te->name + "'");
        te->args.push_back(e);
        if (isOp("(")) {
          parseArgs(te);
        } else {
          const Token &a = peek();
          bool argStart =
              a.kind == Tok::String || a.kind == Tok::Int || a.kind == Tok::Float ||
              isOp("[") || isOp("{") ||
              (a.kind == Tok::Name && a.text != "else" && a.text != "or" &&
               a.text != "and" && a.text != "is" && a.text != "in" && a.text != "not" &&
               a.text != "if");
          if (argStart)
            te->args.push_back(parsePostfix(parsePrimary()));
        }
        e = seal(te);
      } else if (isOp("(")) {
        e = parseCall(e);
      } else {
        return e;
      }
    }
  }

  /// Counts the parser's recursion (nested expressions and blocks) so that
  /// hostile nesting fails cleanly instead of overflowing the stack.
  struct Nest {
    int &depth;
    Nest(Parser &p, const Token &at, const char *what)
        : depth(what[0] == 's' ? p.blockNest_ : p.exprNest_) {
      if (++depth > kMaxParseDepth)
        p.failAt(at, std::string(what) + " nested too deeply (Kiln's limit is " +
                         std::to_string(kMaxParseDepth) + " levels)");
    }
    ~Nest() { --depth; }
  };

  /// Records the height of a freshly built expression node and fails past
  /// the nesting limit (long operator chains such as 1+1+...+1 build deep
  /// trees without deep parser recursion).
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    for (const ExprPtr &a : e->args)
      if (a)
        d = std::max(d, a->depth);
    for (const auto &kw : e->kwargs)
      d = std::max(d, kw.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxParseDepth)
      fail("expression nested too deeply (Kiln's limit is " + std::to_string(kMaxParseDepth) +
               " levels)",
           e->line, e->col);
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int exprNest_ = 0;  ///< expression recursion
  int blockNest_ = 0; ///< statement-block recursion
  int loopDepth_ = 0;
  std::vector<std::string> openTag_;
  std::vector<int> openLine_;
};

//===----------------------------------------------------------------------===//
// Evaluator
//===----------------------------------------------------------------------===//

const char *typeName(const Value &v) {
  switch (v.kind()) {
  case Value::Kind::Undefined: return "Undefined";
  case Value::Kind::None: return "NoneType";
  case Value::Kind::Bool: return "bool";
  case Value::Kind::Int: return "int";
  case Value::Kind::Float: return "float";
  case Value::Kind::String: return "str";
  case Value::Kind::List: return v.isTuple() ? "tuple" : "list";
  case Value::Kind::Dict: return v.isNamespace() ? "Namespace" : "dict";
  case Value::Kind::Callable: return "function";
  }
  return "?";
}

bool truthy(const Value &v) {
  switch (v.kind()) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
    return false;
  case Value::Kind::Bool:
  case Value::Kind::Int:
    return v.asInt() != 0;
  case Value::Kind::Float:
    return v.asFloat() != 0.0;
  case Value::Kind::String:
    return !v.asString().empty();
  case Value::Kind::List:
    return !v.asList().empty();
  case Value::Kind::Dict:
    return v.isNamespace() || !v.asDict().empty();
  case Value::Kind::Callable:
    return true;
  }
  return false;
}

bool isIntLike(const Value &v) {
  return v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool;
}
bool isNumeric(const Value &v) { return isIntLike(v) || v.kind() == Value::Kind::Float; }

bool equals(const Value &a, const Value &b) {
  if (isNumeric(a) && isNumeric(b)) {
    if (isIntLike(a) && isIntLike(b))
      return a.asInt() == b.asInt();
    return a.asFloat() == b.asFloat();
  }
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
    return true;
  case Value::Kind::String:
    chargeBytes(std::min(a.asString().size(), b.asString().size()));
    return a.asString() == b.asString();
  case Value::Kind::List: {
    if (a.isTuple() != b.isTuple() || a.asList().size() != b.asList().size())
      return false;
    charge(a.asList().size());
    for (size_t i = 0; i < a.asList().size(); ++i)
      if (!equals(a.asList()[i], b.asList()[i]))
        return false;
    return true;
  }
  case Value::Kind::Dict: {
    if (a.isNamespace() || b.isNamespace())
      return &a.asDict() == &b.asDict();
    if (a.asDict().size() != b.asDict().size())
      return false;
    charge(uint64_t(a.asDict().size()) * a.asDict().size());
    for (const auto &kv : a.asDict()) {
      bool found = false;
      for (const auto &kw : b.asDict())
        if (equals(kv.first, kw.first)) {
          found = equals(kv.second, kw.second);
          break;
        }
      if (!found)
        return false;
    }
    return true;
  }
  case Value::Kind::Callable:
    return &a.asFunction() == &b.asFunction();
  default:
    return false;
  }
}

/// Python's <, as -1/0/1; throws for unordered types.
int compare(const Value &a, const Value &b, const std::string &op) {
  if (isNumeric(a) && isNumeric(b)) {
    if (isIntLike(a) && isIntLike(b))
      return a.asInt() < b.asInt() ? -1 : a.asInt() > b.asInt();
    double x = a.asFloat(), y = b.asFloat();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.isString() && b.isString()) {
    chargeBytes(std::min(a.asString().size(), b.asString().size()));
    int c = a.asString().compare(b.asString());
    return c < 0 ? -1 : c > 0;
  }
  if (a.isList() && b.isList() && a.isTuple() == b.isTuple()) {
    const ValueList &x = a.asList(), &y = b.asList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i]))
        return compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  throw TemplateError{"'" + op + "' not supported between instances of '" + typeName(a) +
                      "' and '" + typeName(b) + "'"};
}

bool contains(const Value &container, const Value &item) {
  if (container.isString()) {
    if (!item.isString())
      throw TemplateError{std::string("'in <string>' requires string as left operand, not ") +
                          typeName(item)};
    chargeSearch(container.asString(), item.asString());
    return container.asString().find(item.asString()) != std::string::npos;
  }
  if (container.isList()) {
    charge(container.asList().size());
    for (const Value &v : container.asList())
      if (equals(v, item))
        return true;
    return false;
  }
  if (container.isDict()) {
    charge(container.asDict().size());
    for (const auto &kv : container.asDict())
      if (equals(kv.first, item))
        return true;
    return false;
  }
  if (container.isUndefined())
    return false;
  throw TemplateError{std::string("argument of type '") + typeName(container) +
                      "' is not iterable"};
}

/// The items a for loop or a filter iterates over.
ValueList iterate(const Value &v) {
  switch (v.kind()) {
  case Value::Kind::Undefined:
    return {};
  case Value::Kind::List:
    charge(v.asList().size());
    return v.asList();
  case Value::Kind::Dict: {
    charge(v.asDict().size());
    ValueList keys;
    for (const auto &kv : v.asDict())
      keys.push_back(kv.first);
    return keys;
  }
  case Value::Kind::String: {
    ValueList chars;
    std::vector<size_t> at = codePointOffsets(v.asString());
    checkListSize(at.size() - 1);
    for (size_t i = 0; i + 1 < at.size(); ++i)
      chars.push_back(Value::string(v.asString().substr(at[i], at[i + 1] - at[i])));
    return chars;
  }
  default:
    throw TemplateError{std::string("'") + typeName(v) + "' object is not iterable"};
  }
}

int64_t lengthOf(const Value &v) {
  switch (v.kind()) {
  case Value::Kind::Undefined:
    return 0;
  case Value::Kind::String:
  {
    int64_t n = 0;
    for (char c : v.asString())
      n += (static_cast<unsigned char>(c) & 0xc0) != 0x80 ? 1 : 0;
    // Invalid bytes decode as themselves (decodeAt): count as codePointOffsets.
    return n == int64_t(v.asString().size()) ? n
                                             : int64_t(codePointOffsets(v.asString()).size() - 1);
  }
  case Value::Kind::List:
    return int64_t(v.asList().size());
  case Value::Kind::Dict:
    return int64_t(v.asDict().size());
  default:
    throw TemplateError{std::string("object of type '") + typeName(v) + "' has no len()"};
  }
}

int64_t floorDiv(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1)
    integerOverflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}

Value arithmetic(const std::string &op, const Value &a, const Value &b) {
  auto bad = [&]() -> TemplateError {
    if (a.isUndefined() || b.isUndefined())
      return TemplateError{"unsupported operand: an operand of '" + op + "' is undefined"};
    return TemplateError{"unsupported operand type(s) for " + op + ": '" + typeName(a) +
                         "' and '" + typeName(b) + "'"};
  };
  if (op == "~") {
    std::string x = toPythonString(a), y = toPythonString(b);
    newString(uint64_t(x.size()) + y.size());
    return Value::string(x + y);
  }
  if (isNumeric(a) && isNumeric(b)) {
    bool ints = isIntLike(a) && isIntLike(b);
    if (op == "+")
      return ints ? Value::integer(addInt(a.asInt(), b.asInt()))
                  : Value::real(a.asFloat() + b.asFloat());
    if (op == "-")
      return ints ? Value::integer(subInt(a.asInt(), b.asInt()))
                  : Value::real(a.asFloat() - b.asFloat());
    if (op == "*")
      return ints ? Value::integer(mulInt(a.asInt(), b.asInt()))
                  : Value::real(a.asFloat() * b.asFloat());
    if (op == "/") {
      if (b.asFloat() == 0)
        throw TemplateError{"division by zero"};
      return Value::real(a.asFloat() / b.asFloat());
    }
    if (op == "//" || op == "%") {
      if (b.asFloat() == 0)
        throw TemplateError{op == "%" ? "modulo by zero" : "integer division or modulo by zero"};
      if (ints) {
        if (op == "%" && b.asInt() == -1)
          return Value::integer(0); // INT64_MIN % -1 is 0, not a trap
        int64_t q = floorDiv(a.asInt(), b.asInt());
        return op == "//" ? Value::integer(q)
                          : Value::integer(subInt(a.asInt(), mulInt(q, b.asInt())));
      }
      double x = a.asFloat(), y = b.asFloat();
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0)))
        m += y;
      return op == "//" ? Value::real(std::floor((x - m) / y)) : Value::real(m);
    }
    if (op == "**") {
      if (ints && b.asInt() >= 0)
        return Value::integer(powInt(a.asInt(), b.asInt()));
      return Value::real(std::pow(a.asFloat(), b.asFloat()));
    }
  }
  if (op == "+" && a.isString() && b.isString()) {
    newString(uint64_t(a.asString().size()) + b.asString().size());
    return Value::string(a.asString() + b.asString());
  }
  if (op == "+" && a.isList() && b.isList() && a.isTuple() == b.isTuple()) {
    checkListSize(uint64_t(a.asList().size()) + b.asList().size());
    ValueList l = a.asList();
    l.insert(l.end(), b.asList().begin(), b.asList().end());
    return a.isTuple() ? Value::tuple(std::move(l)) : Value::list(std::move(l));
  }
  if (op == "*" && ((a.isString() || a.isList()) && isIntLike(b))) {
    int64_t n = std::max<int64_t>(0, b.asInt());
    if (a.isString()) {
      const std::string &x = a.asString();
      if (!x.empty() && uint64_t(n) > kMaxStringBytes / x.size())
        checkStringSize(kMaxStringBytes + 1);
      newString(uint64_t(n) * x.size());
      std::string s;
      s.reserve(size_t(n) * x.size());
      for (int64_t i = 0; i < n; ++i)
        s += x;
      return Value::string(s);
    }
    const ValueList &x = a.asList();
    if (!x.empty() && uint64_t(n) > kMaxListItems / x.size())
      checkListSize(kMaxListItems + 1);
    checkListSize(uint64_t(n) * x.size());
    if (x.empty())
      return a.isTuple() ? Value::tuple({}) : Value::list();
    ValueList l;
    for (int64_t i = 0; i < n; ++i)
      l.insert(l.end(), x.begin(), x.end());
    return a.isTuple() ? Value::tuple(std::move(l)) : Value::list(std::move(l));
  }
  if (op == "*" && isIntLike(a) && (b.isString() || b.isList()))
    return arithmetic(op, b, a);
  if (op == "%" && a.isString())
    throw TemplateError{"printf-style string formatting ('%' on a string) is not supported"};
  throw bad();
}

/// Python slice index adjustment (PySlice_AdjustIndices).
std::vector<int64_t> sliceIndices(int64_t len, const Value &start, const Value &stop,
                                  const Value &step) {
  auto get = [](const Value &v, const char *what) -> std::optional<int64_t> {
    if (v.isUndefined() || v.isNone())
      return std::nullopt;
    if (!isIntLike(v))
      throw TemplateError{std::string("slice ") + what + " must be an integer or none, not " +
                          typeName(v)};
    return v.asInt();
  };
  int64_t st = get(step, "step").value_or(1);
  if (st == 0)
    throw TemplateError{"slice step cannot be zero"};
  auto adjust = [&](std::optional<int64_t> i, int64_t dflt) {
    if (!i)
      return dflt;
    int64_t x = *i;
    if (x < 0) {
      x += len;
      if (x < 0)
        x = st < 0 ? -1 : 0;
    } else if (x >= len) {
      x = st < 0 ? len - 1 : len;
    }
    return x;
  };
  int64_t b = adjust(get(start, "start"), st < 0 ? len - 1 : 0);
  int64_t e = adjust(get(stop, "stop"), st < 0 ? -1 : len);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    idx.push_back(i);
    if (__builtin_add_overflow(i, st, &i))
      break;
  }
  charge(idx.size());
  return idx;
}

using Kwargs = std::vector<std::pair<std::string, Value>>;

/// Binds call arguments to parameter names (Python rules); missing ones stay
/// Undefined unless `defaults` gives them.
std::vector<Value> bindArgs(const std::string &fn, const std::vector<std::string> &params,
                            const std::vector<Value> &args, const Kwargs &kwargs,
                            const std::vector<Value> &defaults = {}) {
  if (args.size() > params.size())
    throw TemplateError{fn + "() takes at most " + std::to_string(params.size()) +
                        " arguments (" + std::to_string(args.size()) + " given)"};
  std::vector<Value> out(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    if (i < defaults.size())
      out[i] = defaults[i];
  for (size_t i = 0; i < args.size(); ++i)
    out[i] = args[i];
  for (const auto &kw : kwargs) {
    auto it = std::find(params.begin(), params.end(), kw.first);
    if (it == params.end())
      throw TemplateError{fn + "() got an unexpected keyword argument '" + kw.first + "'"};
    out[size_t(it - params.begin())] = kw.second;
  }
  return out;
}

std::string requireString(const Value &v, const std::string &what) {
  if (!v.isString())
    throw TemplateError{what + " must be a string, not " + typeName(v)};
  return v.asString();
}

/// Python str.split(sep=None, maxsplit=-1).
Value pySplit(const std::string &s, const Value &sepV, int64_t maxsplit) {
  ValueList parts;
  auto addPart = [&parts](Value v) {
    if (parts.size() >= kMaxListItems)
      checkListSize(parts.size() + 1);
    charge(1);
    parts.push_back(std::move(v));
  };
  if (sepV.isUndefined() || sepV.isNone()) {
    size_t i = 0;
    std::vector<size_t> at = codePointOffsets(s);
    size_t k = 0, n = at.size() - 1;
    size_t len = 1;
    while (k < n) {
      while (k < n && isPySpace(decodeAt(s, at[k], len)))
        ++k;
      if (k >= n)
        break;
      if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
        size_t e = n;
        while (e > k && isPySpace(decodeAt(s, at[e - 1], len)))
          --e;
        addPart(Value::string(s.substr(at[k], at[e] - at[k])));
        break;
      }
      size_t b = k;
      while (k < n && !isPySpace(decodeAt(s, at[k], len)))
        ++k;
      addPart(Value::string(s.substr(at[b], at[k] - at[b])));
    }
    (void)i;
    return Value::list(std::move(parts));
  }
  std::string sep = requireString(sepV, "split() separator");
  if (sep.empty())
    throw TemplateError{"empty separator"};
  chargeSearch(s, sep);
  size_t b = 0;
  for (;;) {
    size_t e = s.find(sep, b);
    if (e == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) == maxsplit)) {
      addPart(Value::string(s.substr(b)));
      break;
    }
    addPart(Value::string(s.substr(b, e - b)));
    b = e + sep.size();
  }
  return Value::list(std::move(parts));
}

std::string pyReplace(const std::string &s, const std::string &from, const std::string &to,
                      int64_t count) {
  chargeSearch(s, from);
  chargeBytes(s.size());
  std::string out;
  auto grow = [&](size_t more) {
    checkStringSize(uint64_t(out.size()) + more);
    chargeBytes(more);
  };
  if (from.empty()) {
    std::vector<size_t> at = codePointOffsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < at.size(); ++i) {
      if (count < 0 || done < count) {
        grow(to.size());
        out += to;
        ++done;
      }
      out += s.substr(at[i], at[i + 1] - at[i]);
    }
    if (count < 0 || done < count)
      out += to;
    return out;
  }
  size_t b = 0;
  int64_t done = 0;
  for (;;) {
    size_t e = s.find(from, b);
    if (e == std::string::npos || (count >= 0 && done >= count)) {
      out += s.substr(b);
      return out;
    }
    grow(e - b + to.size());
    out += s.substr(b, e - b) + to;
    b = e + from.size();
    ++done;
  }
}

/// Python str.title(): a cased character after a cased one is lowercased,
/// any other is titlecased (simple mappings, as mapCase).
std::string titleCase(const std::string &s) {
  bool prevCased = false;
  return mapCodePoints(s, [&prevCased](utf8proc_int32_t c, size_t) {
    utf8proc_int32_t m = prevCased ? utf8proc_tolower(c) : utf8proc_totitle(c);
    prevCased = isCased(c);
    return m;
  });
}

/// Jinja2's title filter (do_title), which is not str.title(): words start
/// after "-", whitespace, "(", "{", "[" or "<"; each word's first character
/// is uppercased and the rest lowercased.
std::string jinjaTitle(const std::string &s) {
  bool wordStart = true;
  return mapCodePoints(s, [&wordStart](utf8proc_int32_t c, size_t) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
               (c < 0x110000 && isPySpace(uint32_t(c)));
    utf8proc_int32_t m = sep ? c : wordStart ? utf8proc_toupper(c) : utf8proc_tolower(c);
    wordStart = sep;
    return m;
  });
}

/// Python (3.8+) str.capitalize(): the first character titlecased, the rest
/// lowercased.
std::string capitalize(const std::string &s) {
  return mapCodePoints(s, [](utf8proc_int32_t c, size_t i) {
    return i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c);
  });
}

/// A bound method of a str or dict value, or Undefined.
Value method(const Value &obj, const std::string &name) {
  auto fn = [&](auto body) { return Value::function(name, body); };
  if (obj.isString()) {
    charge(1 + obj.asString().size() / 256);
    std::string s = obj.asString();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return fn([s, name](const ValueList &a, const Kwargs &kw) {
        std::vector<Value> p = bindArgs(name, {"chars"}, a, kw);
        std::string chars;
        bool have = !(p[0].isUndefined() || p[0].isNone());
        if (have)
          chars = requireString(p[0], name + "() argument");
        return Value::string(pyStrip(s, have ? &chars : nullptr, name != "rstrip",
                                     name != "lstrip"));
      });
    if (name == "upper" || name == "lower")
      return fn([s, name](const ValueList &a, const Kwargs &kw) {
        bindArgs(name, {}, a, kw);
        return Value::string(mapCase(s, name == "upper"));
      });
    if (name == "title" || name == "capitalize")
      return fn([s, name](const ValueList &a, const Kwargs &kw) {
        bindArgs(name, {}, a, kw);
        return Value::string(name == "title" ? titleCase(s) : capitalize(s));
      });
    if (name == "split")
      return fn([s](const ValueList &a, const Kwargs &kw) {
        std::vector<Value> p = bindArgs("split", {"sep", "maxsplit"}, a, kw);
        return pySplit(s, p[0], isIntLike(p[1]) ? p[1].asInt() : -1);
      });
    if (name == "startswith" || name == "endswith")
      return fn([s, name](const ValueList &a, const Kwargs &kw) {
        std::vector<Value> p = bindArgs(name, {"prefix"}, a, kw);
        ValueList options = p[0].isList() ? p[0].asList() : ValueList{p[0]};
        for (const Value &o : options) {
          std::string x = requireString(o, name + "() argument");
          bool hit = name == "startswith"
                         ? s.compare(0, x.size(), x) == 0
                         : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
          if (hit)
            return Value::boolean(true);
        }
        return Value::boolean(false);
      });
    if (name == "replace")
      return fn([s](const ValueList &a, const Kwargs &kw) {
        std::vector<Value> p = bindArgs("replace", {"old", "new", "count"}, a, kw);
        return Value::string(pyReplace(s, requireString(p[0], "replace() argument 1"),
                                       requireString(p[1], "replace() argument 2"),
                                       isIntLike(p[2]) ? p[2].asInt() : -1));
      });
    if (name == "join")
      return fn([s](const ValueList &a, const Kwargs &kw) {
        std::vector<Value> p = bindArgs("join", {"iterable"}, a, kw);
        std::string out;
        ValueList items = iterate(p[0]);
        for (size_t i = 0; i < items.size(); ++i) {
          const std::string &item = requireString(items[i], "join() item");
          checkStringSize(uint64_t(out.size()) + s.size() + item.size());
          chargeBytes(s.size() + item.size());
          out += (i ? s : "") + item;
        }
        return Value::string(out);
      });
    if (name == "find" || name == "count")
      return fn([s, name](const ValueList &a, const Kwargs &kw) {
        std::vector<Value> p = bindArgs(name, {"sub"}, a, kw);
        std::string x = requireString(p[0], name + "() argument");
        chargeSearch(s, x);
        if (name == "find") {
          size_t at = s.find(x);
          return Value::integer(at == std::string::npos
                                    ? -1
                                    : int64_t(codePointOffsets(s.substr(0, at)).size() - 1));
        }
        int64_t n = 0;
        if (x.empty())
          return Value::integer(int64_t(codePointOffsets(s).size()));
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size()))
          ++n;
        return Value::integer(n);
      });
    if (name == "splitlines")
      return fn([s](const ValueList &a, const Kwargs &kw) {
        bindArgs("splitlines", {}, a, kw);
        ValueList lines;
        size_t b = 0;
        for (size_t i = 0; i < s.size(); ++i)
          if (s[i] == '\n' || s[i] == '\r') {
            if (lines.size() >= kMaxListItems)
              checkListSize(lines.size() + 1);
            charge(1);
            lines.push_back(Value::string(s.substr(b, i - b)));
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')
              ++i;
            b = i + 1;
          }
        if (b < s.size())
          lines.push_back(Value::string(s.substr(b)));
        return Value::list(std::move(lines));
      });
    return Value();
  }
  if (obj.isDict() && !obj.isNamespace()) {
    Value d = obj;
    if (name == "items" || name == "keys" || name == "values")
      return fn([d, name](const ValueList &a, const Kwargs &kw) {
        bindArgs(name, {}, a, kw);
        ValueList out;
        for (const auto &kv : d.asDict())
          out.push_back(name == "items" ? Value::tuple({kv.first, kv.second})
                        : name == "keys" ? kv.first
                                         : kv.second);
        return Value::list(std::move(out));
      });
    if (name == "get")
      return fn([d](const ValueList &a, const Kwargs &kw) {
        std::vector<Value> p = bindArgs("get", {"key", "default"}, a, kw);
        for (const auto &kv : d.asDict())
          if (equals(kv.first, p[0]))
            return kv.second;
        return p[1].isUndefined() ? Value::none() : p[1];
      });
  }
  return Value();
}

/// Jinja2 Environment.getattr: attribute first, then item.
Value getAttr(const Value &obj, const std::string &name) {
  if (obj.isUndefined())
    throw TemplateError{"attribute '" + name + "' of an undefined value"};
  Value m = method(obj, name);
  if (!m.isUndefined())
    return m;
  if (obj.isDict())
    if (const Value *v = obj.find(name))
      return *v;
  return Value();
}

/// Jinja2 Environment.getitem: item first, then attribute.
Value getItem(const Value &obj, const Value &key) {
  if (obj.isUndefined())
    throw TemplateError{"subscript of an undefined value"};
  if (obj.isDict()) {
    for (const auto &kv : obj.asDict())
      if (equals(kv.first, key))
        return kv.second;
  } else if ((obj.isList() || obj.isString()) && isIntLike(key)) {
    int64_t n = lengthOf(obj);
    int64_t i = key.asInt() < 0 ? key.asInt() + n : key.asInt();
    if (i >= 0 && i < n) {
      if (obj.isList())
        return obj.asList()[size_t(i)];
      std::vector<size_t> at = codePointOffsets(obj.asString());
      return Value::string(obj.asString().substr(at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]));
    }
    return Value();
  }
  if (key.isString())
    return getAttr(obj, key.asString());
  return Value();
}

struct LoopControl {
  enum { None, Break, Continue } kind = None;
};

class Renderer {
public:
  Renderer(const std::string &file, const Value &context) : file_(file) {
    scopes_.emplace_back();
    defineGlobals();
    if (context.isDict())
      for (const auto &kv : context.asDict())
        if (kv.first.isString())
          scopes_.back()[kv.first.asString()] = kv.second;
  }

  void render(const Node &n, std::string &out) { exec(n, out); }

private:
  using Scope = std::unordered_map<std::string, Value>;

  void defineGlobals() {
    Scope &g = scopes_.back();
    g["raise_exception"] = Value::function("raise_exception", [](const ValueList &a, const Kwargs &) -> Value {
      throw TemplateError{"template raised: " + (a.empty() ? std::string() : toPythonString(a[0]))};
    });
    g["strftime_now"] = Value::function("strftime_now", [](const ValueList &a, const Kwargs &kw) {
      std::vector<Value> p = bindArgs("strftime_now", {"format"}, a, kw);
      std::string fmt = requireString(p[0], "strftime_now() format");
      std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[512];
      size_t len = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
      return Value::string(std::string(buf, len));
    });
    g["namespace"] = Value::function("namespace", [](const ValueList &a, const Kwargs &kw) {
      ValueDict d;
      for (const Value &v : a) {
        if (!v.isDict())
          throw TemplateError{"namespace() takes keyword arguments or a dict"};
        d.insert(d.end(), v.asDict().begin(), v.asDict().end());
      }
      Value ns = Value::namespaceObject(std::move(d));
      for (const auto &k : kw)
        ns.set(k.first, k.second);
      return ns;
    });
    g["dict"] = Value::function("dict", [](const ValueList &a, const Kwargs &kw) {
      if (!a.empty())
        throw TemplateError{"dict() takes keyword arguments only"};
      Value d = Value::dict();
      for (const auto &k : kw)
        d.set(k.first, k.second);
      return d;
    });
    g["range"] = Value::function("range", [](const ValueList &a, const Kwargs &kw) {
      if (!kw.empty() || a.empty() || a.size() > 3)
        throw TemplateError{"range() takes 1 to 3 integer arguments"};
      for (const Value &v : a)
        if (!isIntLike(v))
          throw TemplateError{std::string("range() argument must be an integer, not ") + typeName(v)};
      int64_t b = a.size() > 1 ? a[0].asInt() : 0;
      int64_t e = a.size() > 1 ? a[1].asInt() : a[0].asInt();
      int64_t st = a.size() > 2 ? a[2].asInt() : 1;
      if (st == 0)
        throw TemplateError{"range() arg 3 must not be zero"};
      ValueList l;
      for (int64_t i = b; st > 0 ? i < e : i > e;) {
        l.push_back(Value::integer(i));
        if (l.size() > kMaxListItems)
          throw TemplateError{"range() too large (over " + std::to_string(kMaxListItems) +
                              " items)"};
        if (__builtin_add_overflow(i, st, &i))
          break; // the next item would be past INT64 range, so past the end
      }
      charge(l.size());
      return Value::list(std::move(l));
    });
  }

  [[noreturn]] void failAt(int line, int col, const std::string &msg) { fail(msg, line, col); }

  Value lookup(const std::string &name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end())
        return f->second;
    }
    return Value();
  }

  LoopControl exec(const Node &n, std::string &out) {
    try {
      charge(1);
    } catch (TemplateError &e) {
      failAt(n.line, n.col, e.message);
    }
    if (++depth_ > 200)
      failAt(n.line, n.col, "recursion too deep (over 200 nested calls or blocks)");
    LoopControl lc = execInner(n, out);
    --depth_;
    return lc;
  }

  LoopControl execInner(const Node &n, std::string &out) {
    switch (n.kind) {
    case Node::Body:
      for (const NodePtr &c : n.children) {
        LoopControl lc = exec(*c, out);
        if (lc.kind != LoopControl::None)
          return lc;
      }
      return {};
    case Node::Text:
      out += n.text;
      checkSize(out, n);
      return {};
    case Node::Output: {
      Value v = eval(*n.expr);
      std::string text;
      try {
        text = toPythonString(v);
        chargeBytes(text.size());
      } catch (TemplateError &e) {
        failAt(n.expr->line, n.expr->col, e.message);
      }
      if (out.size() + text.size() > kMaxStringBytes)
        failAt(n.line, n.col, "rendered text exceeds 64 MiB");
      out += text;
      return {};
    }
    case Node::If:
      for (const auto &b : n.branches)
        if (truthy(eval(*b.first)))
          return exec(*b.second, out);
      if (n.elseBody)
        return exec(*n.elseBody, out);
      return {};
    case Node::For:
      return execFor(n, out);
    case Node::Set: {
      Value v = eval(*n.expr);
      if (!n.attr.empty()) {
        Value ns = lookup(n.targets[0]);
        if (!ns.isNamespace())
          failAt(n.line, n.col, "cannot assign attribute '" + n.attr + "' of '" + n.targets[0] +
                                    "': not a namespace() object");
        ns.set(n.attr, v);
        return {};
      }
      assign(n, n.targets, v);
      return {};
    }
    case Node::SetBlock: {
      std::string captured;
      exec(*n.body, captured);
      scopes_.back()[n.targets[0]] = Value::string(captured);
      return {};
    }
    case Node::Macro:
      defineMacro(n);
      return {};
    case Node::Break: {
      LoopControl lc;
      lc.kind = LoopControl::Break;
      return lc;
    }
    case Node::Continue: {
      LoopControl lc;
      lc.kind = LoopControl::Continue;
      return lc;
    }
    }
    return {};
  }

  void checkSize(const std::string &out, const Node &n) {
    if (out.size() > (size_t(64) << 20))
      failAt(n.line, n.col, "rendered text exceeds 64 MiB");
  }

  void assign(const Node &n, const std::vector<std::string> &targets, const Value &v) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    ValueList items = iterate(v);
    if (items.size() != targets.size())
      failAt(n.line, n.col, "cannot unpack " + std::to_string(items.size()) + " values into " +
                                std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i)
      scopes_.back()[targets[i]] = items[i];
  }

  LoopControl execFor(const Node &n, std::string &out) {
    Value seq = eval(*n.expr);
    ValueList items;
    try {
      items = iterate(seq);
    } catch (TemplateError &e) {
      failAt(n.expr->line, n.expr->col, e.message);
    }
    if (n.filter) {
      ValueList kept;
      for (const Value &item : items) {
        scopes_.emplace_back();
        assign(n, n.targets, item);
        bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep)
          kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.elseBody)
        return exec(*n.elseBody, out);
      return {};
    }
    int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      scopes_.emplace_back();
      Value loop = Value::dict();
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(len - i));
      loop.set("revindex0", Value::integer(len - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == len - 1));
      loop.set("length", Value::integer(len));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      if (i > 0)
        loop.set("previtem", items[size_t(i - 1)]);
      if (i + 1 < len)
        loop.set("nextitem", items[size_t(i + 1)]);
      loop.set("cycle", Value::function("cycle", [i](const ValueList &a, const Kwargs &) {
                 if (a.empty())
                   throw TemplateError{"no items for cycling given"};
                 return a[size_t(i) % a.size()];
               }));
      scopes_.back()["loop"] = loop;
      try {
        charge(kLoopIterationCost);
      } catch (TemplateError &e) {
        failAt(n.line, n.col, e.message);
      }
      assign(n, n.targets, items[size_t(i)]);
      LoopControl lc = exec(*n.body, out);
      scopes_.pop_back();
      if (lc.kind == LoopControl::Break)
        break;
    }
    return {};
  }

  void defineMacro(const Node &n) {
    // Defaults are evaluated at call time in the caller's context, as Jinja2.
    const Node *node = &n;
    Renderer *self = this;
    scopes_.back()[n.name] = Value::function(
        n.name, [self, node](const ValueList &a, const Kwargs &kw) -> Value {
          std::vector<Value> defaults;
          for (const ExprPtr &d : node->defaults)
            defaults.push_back(d ? self->eval(*d) : Value());
          std::vector<Value> p = bindArgs(node->name, node->targets, a, kw, defaults);
          std::vector<Scope> saved;
          saved.swap(self->scopes_);
          self->scopes_.push_back(saved.front()); // globals and the context
          self->scopes_.emplace_back();
          for (size_t i = 0; i < p.size(); ++i)
            self->scopes_.back()[node->targets[i]] = p[i];
          std::string out;
          try {
            self->exec(*node->body, out);
          } catch (...) {
            self->scopes_.swap(saved);
            throw;
          }
          self->scopes_.swap(saved);
          return Value::string(out);
        });
  }

  Value callValue(const Expr &at, const Value &fn, const ValueList &args, const Kwargs &kwargs) {
    if (!fn.isCallable()) {
      if (fn.isUndefined())
        failAt(at.line, at.col, "call of an undefined value" +
                                    (at.args[0]->kind == Expr::Name
                                         ? " '" + at.args[0]->name + "'"
                                         : at.args[0]->kind == Expr::Attr
                                               ? " (no method '" + at.args[0]->name + "')"
                                               : std::string()));
      failAt(at.line, at.col, std::string("'") + typeName(fn) + "' object is not callable");
    }
    return fn.asFunction()(args, kwargs);
  }

  Value eval(const Expr &e) {
    try {
      charge(1);
      // Expressions are at most kMaxParseDepth deep, but macro calls nest
      // them; bound the total so the C++ stack cannot overflow.
      if (++evalDepth_ > 2000)
        throw TemplateError{"expression evaluation nested too deeply (over 2000 levels "
                            "through macro calls)"};
      Value v = evalInner(e);
      if (v.depth() > kMaxValueDepth)
        throw TemplateError{"value nested too deeply (over " + std::to_string(kMaxValueDepth) +
                            " levels of lists and dicts)"};
      --evalDepth_;
      return v;
    } catch (TemplateError &err) {
      --evalDepth_;
      if (err.line == 0) {
        err.line = e.line;
        err.col = e.col;
      }
      throw;
    }
  }

  void evalArgs(const Expr &e, size_t first, ValueList &args, Kwargs &kwargs) {
    for (size_t i = first; i < e.args.size(); ++i)
      args.push_back(eval(*e.args[i]));
    for (const auto &kw : e.kwargs)
      kwargs.emplace_back(kw.first, eval(*kw.second));
  }

  Value evalInner(const Expr &e) {
    switch (e.kind) {
    case Expr::Literal:
      return e.literal;
    case Expr::Name:
      return lookup(e.name);
    case Expr::ListLit:
    case Expr::TupleLit: {
      ValueList l;
      for (const ExprPtr &a : e.args)
        l.push_back(eval(*a));
      return e.kind == Expr::TupleLit ? Value::tuple(std::move(l)) : Value::list(std::move(l));
    }
    case Expr::DictLit: {
      ValueDict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        Value v = eval(*e.args[i + 1]);
        bool replaced = false;
        charge(d.size());
        for (auto &kv : d)
          if (equals(kv.first, k)) {
            kv.second = v;
            replaced = true;
          }
        if (!replaced)
          d.emplace_back(k, v);
      }
      return Value::dict(std::move(d));
    }
    case Expr::Attr: {
      Value obj = eval(*e.args[0]);
      if (obj.isUndefined())
        throw TemplateError{undefinedName(*e.args[0]) + " is undefined (reading its attribute '" +
                            e.name + "')"};
      return getAttr(obj, e.name);
    }
    case Expr::Subscript: {
      Value obj = eval(*e.args[0]);
      if (obj.isUndefined())
        throw TemplateError{undefinedName(*e.args[0]) + " is undefined (subscripted)"};
      return getItem(obj, eval(*e.args[1]));
    }
    case Expr::Slice: {
      Value obj = eval(*e.args[0]);
      if (obj.isUndefined())
        throw TemplateError{undefinedName(*e.args[0]) + " is undefined (sliced)"};
      Value parts[3];
      for (int k = 0; k < 3; ++k)
        if (e.args[size_t(k) + 1])
          parts[k] = eval(*e.args[size_t(k) + 1]);
      if (obj.isList()) {
        ValueList l;
        for (int64_t i : sliceIndices(int64_t(obj.asList().size()), parts[0], parts[1], parts[2]))
          l.push_back(obj.asList()[size_t(i)]);
        return obj.isTuple() ? Value::tuple(std::move(l)) : Value::list(std::move(l));
      }
      if (obj.isString()) {
        std::vector<size_t> at = codePointOffsets(obj.asString());
        std::string s;
        for (int64_t i : sliceIndices(int64_t(at.size() - 1), parts[0], parts[1], parts[2]))
          s += obj.asString().substr(at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]);
        return Value::string(s);
      }
      throw TemplateError{std::string("'") + typeName(obj) + "' object is not subscriptable"};
    }
    case Expr::Call: {
      Value fn = eval(*e.args[0]);
      ValueList args;
      Kwargs kwargs;
      evalArgs(e, 1, args, kwargs);
      return callValue(e, fn, args, kwargs);
    }
    case Expr::Filter: {
      Value v = eval(*e.args[0]);
      ValueList args;
      Kwargs kwargs;
      evalArgs(e, 1, args, kwargs);
      return applyFilter(e, v, args, kwargs);
    }
    case Expr::Test: {
      Value v;
      if (e.name == "defined" || e.name == "undefined") {
        // An undefined attribute is fine here; an attribute of an undefined
        // value is still an error in Jinja2.
        v = eval(*e.args[0]);
      } else {
        v = eval(*e.args[0]);
      }
      ValueList args;
      Kwargs kwargs;
      evalArgs(e, 1, args, kwargs);
      bool r = applyTest(e.name, v, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case Expr::Neg:
    case Expr::Pos: {
      Value v = eval(*e.args[0]);
      if (!isNumeric(v))
        throw TemplateError{std::string("bad operand type for unary ") +
                            (e.kind == Expr::Neg ? "-" : "+") + ": '" + typeName(v) + "'"};
      if (e.kind == Expr::Pos)
        return isIntLike(v) ? Value::integer(v.asInt()) : v;
      return isIntLike(v) ? Value::integer(negInt(v.asInt())) : Value::real(-v.asFloat());
    }
    case Expr::Not:
      return Value::boolean(!truthy(eval(*e.args[0])));
    case Expr::And: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::Or: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::Binary:
      return arithmetic(e.name, eval(*e.args[0]), eval(*e.args[1]));
    case Expr::Compare: {
      Value left = eval(*e.args[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        const std::string &op = e.ops[i];
        bool r;
        if (op == "==")
          r = equals(left, right);
        else if (op == "!=")
          r = !equals(left, right);
        else if (op == "in")
          r = contains(right, left);
        else if (op == "not in")
          r = !contains(right, left);
        else {
          int c = compare(left, right, op);
          r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!r)
          return Value::boolean(false);
        left = right;
      }
      return Value::boolean(true);
    }
    case Expr::Cond:
      if (truthy(eval(*e.args[0])))
        return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value();
    }
    return Value();
  }

  static std::string undefinedName(const Expr &e) {
    if (e.kind == Expr::Name)
      return "'" + e.name + "'";
    if (e.kind == Expr::Attr)
      return "attribute '" + e.name + "'";
    return "the value";
  }

  bool applyTest(const std::string &name, const Value &v, const ValueList &args) {
    auto arg = [&](size_t i) -> const Value & {
      if (i >= args.size())
        throw TemplateError{"test '" + name + "' needs an argument"};
      return args[i];
    };
    if (name == "defined")
      return !v.isUndefined();
    if (name == "undefined")
      return v.isUndefined();
    if (name == "none")
      return v.isNone();
    if (name == "string")
      return v.isString();
    if (name == "number")
      return isNumeric(v);
    if (name == "integer")
      return v.kind() == Value::Kind::Int;
    if (name == "float")
      return v.kind() == Value::Kind::Float;
    if (name == "boolean")
      return v.kind() == Value::Kind::Bool;
    if (name == "true")
      return v.kind() == Value::Kind::Bool && v.asBool();
    if (name == "false")
      return v.kind() == Value::Kind::Bool && !v.asBool();
    if (name == "mapping")
      return v.isDict();
    if (name == "sequence")
      return v.isList() || v.isString() || v.isDict();
    if (name == "iterable")
      return v.isList() || v.isString() || v.isDict();
    if (name == "callable")
      return v.isCallable();
    if (name == "lower")
      return v.isString() && mapCase(v.asString(), 0) == v.asString();
    if (name == "upper")
      return v.isString() && mapCase(v.asString(), 1) == v.asString();
    if (name == "odd" || name == "even") {
      if (!isIntLike(v))
        throw TemplateError{"test '" + name + "' needs an integer"};
      return (((v.asInt() % 2) + 2) % 2 == 1) == (name == "odd");
    }
    if (name == "divisibleby") {
      if (!isIntLike(v) || !isIntLike(arg(0)) || arg(0).asInt() == 0)
        throw TemplateError{"test 'divisibleby' needs integers (and a non-zero divisor)"};
      return v.asInt() % arg(0).asInt() == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==")
      return equals(v, arg(0));
    if (name == "ne" || name == "!=")
      return !equals(v, arg(0));
    if (name == "lt" || name == "lessthan" || name == "<")
      return compare(v, arg(0), "<") < 0;
    if (name == "le" || name == "<=")
      return compare(v, arg(0), "<=") <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">")
      return compare(v, arg(0), ">") > 0;
    if (name == "ge" || name == ">=")
      return compare(v, arg(0), ">=") >= 0;
    if (name == "in")
      return contains(arg(0), v);
    if (name == "sameas")
      return v.kind() == arg(0).kind() && equals(v, arg(0)) &&
             (!v.isList() || &v.asList() == &arg(0).asList()) &&
             (!v.isDict() || &v.asDict() == &arg(0).asDict());
    throw TemplateError{"unknown test '" + name + "'"};
  }

  /// Items for select/reject/selectattr/rejectattr/map.
  Value selectLike(const std::string &filter, const Value &v, const ValueList &args,
                   const Kwargs &kwargs) {
    ValueList items = iterate(v);
    bool attrForm = filter == "selectattr" || filter == "rejectattr";
    bool reject = filter == "reject" || filter == "rejectattr";
    ValueList out;
    if (filter == "map") {
      std::string attribute;
      Value dflt;
      for (const auto &kw : kwargs) {
        if (kw.first == "attribute")
          attribute = requireString(kw.second, "map(attribute=)");
        else if (kw.first == "default")
          dflt = kw.second;
        else
          throw TemplateError{"map() got an unexpected keyword argument '" + kw.first + "'"};
      }
      if (attribute.empty() && args.empty())
        throw TemplateError{"map() needs a filter name or attribute="};
      for (const Value &item : items) {
        if (!attribute.empty()) {
          Value r = attrPath(item, attribute);
          out.push_back(r.isUndefined() && !dflt.isUndefined() ? dflt : r);
        } else {
          std::string fname = requireString(args[0], "map() filter name");
          ValueList rest(args.begin() + 1, args.end());
          Expr fake;
          fake.kind = Expr::Filter;
          fake.name = fname;
          out.push_back(applyFilter(fake, item, rest, {}));
        }
      }
      return Value::list(std::move(out));
    }
    size_t t0 = 0;
    std::string attribute;
    if (attrForm) {
      if (args.empty())
        throw TemplateError{filter + "() needs an attribute name"};
      attribute = requireString(args[0], filter + "() attribute");
      t0 = 1;
    }
    for (const Value &item : items) {
      Value subject = attrForm ? attrPath(item, attribute) : item;
      bool r;
      if (args.size() > t0) {
        std::string test = requireString(args[t0], filter + "() test name");
        ValueList rest(args.begin() + long(t0) + 1, args.end());
        r = applyTest(test, subject, rest);
      } else {
        r = truthy(subject);
      }
      if (r != reject)
        out.push_back(item);
    }
    return Value::list(std::move(out));
  }

  /// "a.b.0" attribute paths of map/selectattr/join/sort (Jinja2 make_attrgetter).
  static Value attrPath(const Value &v, const std::string &path) {
    Value cur = v;
    size_t b = 0;
    while (b <= path.size()) {
      size_t e = path.find('.', b);
      if (e == std::string::npos)
        e = path.size();
      std::string part = path.substr(b, e - b);
      if (cur.isUndefined())
        return cur;
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
      cur = getItem(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
      b = e + 1;
    }
    return cur;
  }

  Value applyFilter(const Expr &e, const Value &v, const ValueList &args, const Kwargs &kwargs) {
    const std::string &f = e.name;
    auto params = [&](std::vector<std::string> names) {
      return bindArgs(f, std::move(names), args, kwargs);
    };
    if (f == "trim") {
      std::vector<Value> p = params({"chars"});
      std::string chars;
      bool have = !(p[0].isUndefined() || p[0].isNone());
      if (have)
        chars = requireString(p[0], "trim() chars");
      return Value::string(pyStrip(toPythonString(v), have ? &chars : nullptr, true, true));
    }
    if (f == "length" || f == "count") {
      params({});
      return Value::integer(lengthOf(v));
    }
    if (f == "upper" || f == "lower") {
      params({});
      return Value::string(mapCase(toPythonString(v), f == "upper"));
    }
    if (f == "title" || f == "capitalize") {
      params({});
      return Value::string(f == "title" ? jinjaTitle(toPythonString(v))
                                        : capitalize(toPythonString(v)));
    }
    if (f == "string") {
      params({});
      return Value::string(toPythonString(v));
    }
    if (f == "safe") {
      params({});
      return v;
    }
    if (f == "e" || f == "escape") {
      params({});
      std::string s = toPythonString(v), out;
      newString(uint64_t(s.size()) * 6);
      for (char c : s)
        out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
               : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : std::string(1, c);
      return Value::string(out);
    }
    if (f == "tojson") {
      std::vector<Value> p = params({"ensure_ascii", "indent", "separators", "sort_keys"});
      if (!p[0].isUndefined() && truthy(p[0]))
        throw TemplateError{"tojson: ensure_ascii=True is not supported"};
      if (!p[2].isUndefined() && !p[2].isNone())
        throw TemplateError{"tojson: separators= is not supported"};
      if (!p[3].isUndefined() && truthy(p[3]))
        throw TemplateError{"tojson: sort_keys=True is not supported"};
      int indent = -1;
      if (!p[1].isUndefined() && !p[1].isNone()) {
        if (!isIntLike(p[1]) || p[1].asInt() < 0 || p[1].asInt() > 64)
          throw TemplateError{"tojson: indent must be an integer in [0, 64]"};
        indent = int(p[1].asInt());
      }
      return Value::string(toJson(v, indent));
    }
    if (f == "default" || f == "d") {
      std::vector<Value> p = params({"default_value", "boolean"});
      Value dflt = p[0].isUndefined() ? Value::string("") : p[0];
      bool boolean = truthy(p[1]);
      if (v.isUndefined() || (boolean && !truthy(v)))
        return dflt;
      return v;
    }
    if (f == "first" || f == "last") {
      params({});
      ValueList items = iterate(v);
      if (items.empty())
        return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
      std::vector<Value> p = params({"d", "attribute"});
      std::string sep = p[0].isUndefined() ? "" : toPythonString(p[0]);
      std::string out;
      ValueList items = iterate(v);
      for (size_t i = 0; i < items.size(); ++i) {
        Value item = p[1].isUndefined() ? items[i] : attrPath(items[i], toPythonString(p[1]));
        std::string text = toPythonString(item);
        checkStringSize(uint64_t(out.size()) + sep.size() + text.size());
        chargeBytes(sep.size() + text.size());
        out += (i ? sep : "") + text;
      }
      return Value::string(out);
    }
    if (f == "items") {
      params({});
      if (v.isUndefined())
        return Value::list();
      if (!v.isDict())
        throw TemplateError{std::string("items: expected a mapping, got ") + typeName(v)};
      ValueList out;
      for (const auto &kv : v.asDict())
        out.push_back(Value::tuple({kv.first, kv.second}));
      return Value::list(std::move(out));
    }
    if (f == "list") {
      params({});
      return Value::list(iterate(v));
    }
    if (f == "reverse") {
      params({});
      if (v.isString()) {
        ValueList chars = iterate(v);
        std::string s;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it)
          s += it->asString();
        return Value::string(s);
      }
      ValueList items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    if (f == "replace") {
      std::vector<Value> p = params({"old", "new", "count"});
      return Value::string(pyReplace(toPythonString(v), toPythonString(p[0]),
                                     toPythonString(p[1]),
                                     isIntLike(p[2]) ? p[2].asInt() : -1));
    }
    if (f == "int") {
      std::vector<Value> p = params({"default", "base"});
      Value dflt = p[0].isUndefined() ? Value::integer(0) : p[0];
      if (isIntLike(v))
        return Value::integer(v.asInt());
      if (v.kind() == Value::Kind::Float) {
        if (std::isnan(v.asFloat()))
          return dflt; // Jinja2: int(nan) is a ValueError, so the default
        return Value::integer(floatToInt(v.asFloat()));
      }
      if (v.isString()) {
        std::string s = pyStrip(v.asString(), nullptr, true, true);
        char *end = nullptr;
        errno = 0;
        long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && *end == 0) {
          if (errno == ERANGE)
            integerOverflow();
          if (!errno)
            return Value::integer(x);
        }
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == 0) {
          if (std::isnan(d))
            return dflt;
          return Value::integer(floatToInt(d));
        }
      }
      return dflt;
    }
    if (f == "float") {
      std::vector<Value> p = params({"default"});
      Value dflt = p[0].isUndefined() ? Value::real(0.0) : p[0];
      if (isNumeric(v))
        return Value::real(v.asFloat());
      if (v.isString()) {
        std::string s = pyStrip(v.asString(), nullptr, true, true);
        char *end = nullptr;
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == 0)
          return Value::real(d);
      }
      return dflt;
    }
    if (f == "abs") {
      params({});
      if (isIntLike(v))
        return Value::integer(v.asInt() < 0 ? negInt(v.asInt()) : v.asInt());
      if (v.kind() == Value::Kind::Float)
        return Value::real(std::fabs(v.asFloat()));
      throw TemplateError{std::string("bad operand type for abs(): '") + typeName(v) + "'"};
    }
    if (f == "min" || f == "max" || f == "sum") {
      params({});
      ValueList items = iterate(v);
      if (f == "sum") {
        Value acc = Value::integer(0);
        for (const Value &x : items)
          acc = arithmetic("+", acc, x);
        return acc;
      }
      if (items.empty())
        return Value();
      Value best = items[0];
      for (const Value &x : items)
        if ((f == "min") ? compare(x, best, "<") < 0 : compare(x, best, ">") > 0)
          best = x;
      return best;
    }
    if (f == "unique") {
      params({});
      ValueList out;
      for (const Value &x : iterate(v))
        if (charge(out.size()), std::none_of(out.begin(), out.end(), [&](const Value &y) { return equals(x, y); }))
          out.push_back(x);
      return Value::list(std::move(out));
    }
    if (f == "indent") {
      std::vector<Value> p = params({"width", "first", "blank"});
      std::string pad = p[0].isUndefined() ? "    "
                        : p[0].isString()  ? p[0].asString()
                                           : std::string(size_t(std::clamp<int64_t>(p[0].asInt(), 0, int64_t(kMaxStringBytes) + 1)), ' ');
      bool first = truthy(p[1]), blank = truthy(p[2]);
      std::string s = toPythonString(v), out;
      checkStringSize(pad.size());
      size_t b = 0;
      bool firstLine = true;
      for (;;) {
        size_t nl = s.find('\n', b);
        std::string line = s.substr(b, nl == std::string::npos ? std::string::npos : nl - b);
        bool indentIt = firstLine ? first : (blank || !line.empty());
        if (firstLine && !first)
          indentIt = false;
        checkStringSize(uint64_t(out.size()) + pad.size() + line.size() + 1);
        chargeBytes(pad.size() + line.size());
        out += (indentIt ? pad : "") + line;
        if (nl == std::string::npos)
          break;
        out += '\n';
        b = nl + 1;
        firstLine = false;
      }
      return Value::string(out);
    }
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr" || f == "map")
      return selectLike(f, v, args, kwargs);
    if (f == "dictsort") {
      params({});
      if (!v.isDict())
        throw TemplateError{"dictsort: expected a mapping"};
      ValueList out;
      for (const auto &kv : v.asDict())
        out.push_back(Value::tuple({kv.first, kv.second}));
      std::stable_sort(out.begin(), out.end(), [](const Value &a, const Value &b) {
        return compare(a.asList()[0], b.asList()[0], "<") < 0;
      });
      return Value::list(std::move(out));
    }
    throw TemplateError{"unknown filter '" + f + "'"};
  }

  std::string file_;
  std::vector<Scope> scopes_;
  int depth_ = 0;
  int evalDepth_ = 0;
};

std::string formatError(const std::string &file, const TemplateError &e) {
  if (e.line > 0)
    return file + ":" + std::to_string(e.line) + ":" + std::to_string(e.col) + ": " + e.message;
  return file + ": " + e.message;
}

} // namespace

Template::Template() = default;
Template::~Template() = default;
Template::Template(Template &&) noexcept = default;
Template &Template::operator=(Template &&) noexcept = default;

bool Template::parse(const std::string &source, const std::string &fileName,
                     std::string &error) {
  fileName_ = fileName;
  // jinja2: newlines normalised to "\n"; one trailing newline dropped.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n')
        ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n')
    src.pop_back();
  try {
    Lexer lexer(src);
    Parser parser(lexer.run());
    root_ = parser.parseTemplate();
    return true;
  } catch (const TemplateError &e) {
    error = formatError(fileName_, e);
  } catch (const std::exception &e) {
    error = fileName_ + ": " + e.what();
  }
  root_.reset();
  return false;
}

bool Template::render(const Value &context, std::string &out, std::string &error) const {
  tWork = 0; // each render has its own work budget
  struct Rendering {
    bool saved = tRendering;
    Rendering() { tRendering = true; }
    ~Rendering() { tRendering = saved; }
  } rendering;
  if (!root_) {
    error = fileName_ + ": no template parsed";
    return false;
  }
  try {
    Renderer r(fileName_, context);
    std::string text;
    r.render(*root_, text);
    out = std::move(text);
    return true;
  } catch (const TemplateError &e) {
    error = formatError(fileName_, e);
  } catch (const std::exception &e) {
    error = fileName_ + ": " + e.what();
  }
  return false;
}

} // namespace kiln::chat
