// A small JSON value with a strict parser and a compact writer: enough for checkpoint headers.
//
// The parser takes untrusted bytes (a checkpoint from disk): it bounds nesting depth, rejects
// trailing garbage, and reports the byte offset of the first problem.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ember::json {

class Value {
 public:
  enum class Kind { null, boolean, number, string, array, object };

  Value() = default;
  static Value boolean(bool b);
  static Value number(std::string text);  // kept as written: integers stay exact
  static Value integer(int64_t n);
  static Value string(std::string s);
  static Value array(std::vector<Value> items = {});
  static Value object(std::map<std::string, Value> members = {});

  Kind kind() const { return kind_; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_number() const { return kind_ == Kind::number; }

  const std::string& as_string() const { return text_; }  // string contents, or number text
  bool as_bool() const { return boolean_; }
  // The number as an exact non-negative or negative integer; false when it is not one.
  bool to_int64(int64_t* out) const;
  const std::vector<Value>& items() const { return items_; }
  const std::map<std::string, Value>& members() const { return members_; }
  std::map<std::string, Value>& members() { return members_; }
  // nullptr when absent (or not an object).
  const Value* find(const std::string& key) const;

 private:
  Kind kind_ = Kind::null;
  bool boolean_ = false;
  std::string text_;
  std::vector<Value> items_;
  std::map<std::string, Value> members_;
};

// Throws ember::Error("json: <what> at byte <offset>") on malformed input.
Value parse(std::string_view text, int max_depth = 32);
// Compact JSON, object keys in sorted order.
std::string write(const Value& value);
// A JSON string literal with quotes and escapes.
std::string quote(std::string_view s);

}  // namespace ember::json
