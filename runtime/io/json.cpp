#include "runtime/io/json.h"

#include <cctype>
#include <charconv>

#include "runtime/error.h"

namespace ember::json {

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.boolean_ = b;
  return v;
}
Value Value::number(std::string text) {
  Value v;
  v.kind_ = Kind::number;
  v.text_ = std::move(text);
  return v;
}
Value Value::integer(int64_t n) {
  return number(std::to_string(n));
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::string;
  v.text_ = std::move(s);
  return v;
}
Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::array;
  v.items_ = std::move(items);
  return v;
}
Value Value::object(std::map<std::string, Value> members) {
  Value v;
  v.kind_ = Kind::object;
  v.members_ = std::move(members);
  return v;
}

bool Value::to_int64(int64_t* out) const {
  if (kind_ != Kind::number) return false;
  const char* begin = text_.data();
  const char* end = begin + text_.size();
  auto [ptr, error] = std::from_chars(begin, end, *out);
  return error == std::errc() && ptr == end;
}

const Value* Value::find(const std::string& key) const {
  if (kind_ != Kind::object) return nullptr;
  auto it = members_.find(key);
  return it == members_.end() ? nullptr : &it->second;
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const { EMBER_FAIL("json: ", what, " at byte ", pos_); }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    if (!consume(c)) fail(what);
  }
  bool consume_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > max_depth_) fail("nesting too deep");
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end of input");
    const char c = text_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value::string(string());
    if (consume_word("true")) return Value::boolean(true);
    if (consume_word("false")) return Value::boolean(false);
    if (consume_word("null")) return Value();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
    fail("unexpected character");
  }

  Value object(int depth) {
    ++pos_;  // '{'
    std::map<std::string, Value> members;
    if (consume('}')) return Value::object(std::move(members));
    do {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a string key");
      std::string key = string();
      expect(':', "expected ':'");
      Value v = value(depth + 1);
      if (!members.emplace(std::move(key), std::move(v)).second) fail("duplicate key");
    } while (consume(','));
    expect('}', "expected ',' or '}'");
    return Value::object(std::move(members));
  }

  Value array(int depth) {
    ++pos_;  // '['
    std::vector<Value> items;
    if (consume(']')) return Value::array(std::move(items));
    do {
      items.push_back(value(depth + 1));
    } while (consume(','));
    expect(']', "expected ',' or ']'");
    return Value::array(std::move(items));
  }

  Value number() {
    const size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])))
        ++pos_;
      if (pos_ == from) fail("malformed number");
    };
    digits();
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      digits();
    }
    return Value::number(std::string(text_.substr(start, pos_ - start)));
  }

  // A string literal; \uXXXX escapes are decoded to UTF-8 (surrogate pairs included).
  std::string string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          uint32_t code = hex4();
          if (code >= 0xD800 && code < 0xDC00) {
            if (!consume_word("\\u")) fail("unpaired surrogate");
            const uint32_t low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("unpaired surrogate");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          fail("unknown escape");
      }
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > text_.size()) fail("short \\u escape");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') {
        code |= static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        code |= static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        code |= static_cast<uint32_t>(h - 'A' + 10);
      } else {
        fail("bad hex digit in \\u escape");
      }
    }
    return code;
  }

  static void append_utf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out.push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (code >> 6)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (code >> 12)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (code >> 18)));
      out.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  std::string_view text_;
  int max_depth_;
  size_t pos_ = 0;
};

void write_to(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::null:
      out += "null";
      return;
    case Value::Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::number:
      out += v.as_string();
      return;
    case Value::Kind::string:
      out += quote(v.as_string());
      return;
    case Value::Kind::array: {
      out.push_back('[');
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out.push_back(',');
        first = false;
        write_to(item, out);
      }
      out.push_back(']');
      return;
    }
    case Value::Kind::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [key, member] : v.members()) {
        if (!first) out.push_back(',');
        first = false;
        out += quote(key);
        out.push_back(':');
        write_to(member, out);
      }
      out.push_back('}');
      return;
    }
  }
}

}  // namespace

Value parse(std::string_view text, int max_depth) {
  return Parser(text, max_depth).document();
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static const char* digits = "0123456789abcdef";
          out += "\\u00";
          out.push_back(digits[(c >> 4) & 0xF]);
          out.push_back(digits[c & 0xF]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string write(const Value& value) {
  std::string out;
  write_to(value, out);
  return out;
}

}  // namespace ember::json
