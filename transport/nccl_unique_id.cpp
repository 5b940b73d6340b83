#include "transport/nccl_unique_id.hpp"

#include <cstring>
#include <optional>
#include <vector>

#include "protocol/errors.hpp"

namespace hotswap::transport {
namespace {

// Far above the ~250 bytes of the real pickle, far below anything that could hurt.
constexpr std::size_t kMaxPickleBytes = 4096;
constexpr std::size_t kMaxStackDepth = 32;

// A value on the pickle machine's stack: only the kinds this pickle builds.
struct Value {
  enum class Kind { kMark, kString, kBytes, kDict, kTuple, kGlobal, kReduced } kind;
  std::string text;          // string or bytes contents; a global's module
  std::string name;          // a global's name
  std::vector<Value> items;  // a tuple's items; a reduce's [callable, args]
};

// Text from the pickle as a message may quote it: printable ASCII as is, every other byte as
// \xNN, so that an error about a hostile pickle is itself valid UTF-8 (it goes into JSON).
std::string printable(const std::string& text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

std::string describe(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kMark:
      return "a mark";
    case Value::Kind::kString:
      return "the string '" + printable(v.text) + "'";
    case Value::Kind::kBytes:
      return std::to_string(v.text.size()) + " bytes";
    case Value::Kind::kDict:
      return "an empty dict";
    case Value::Kind::kTuple:
      return "a " + std::to_string(v.items.size()) + "-tuple";
    case Value::Kind::kGlobal:
      return "the global " + printable(v.text) + "." + printable(v.name);
    case Value::Kind::kReduced:
      return "a call of " + describe(v.items[0]);
  }
  return "?";
}

class PickleWalker {
 public:
  explicit PickleWalker(std::string_view data) : data_(data) {}

  Value run() {
    if (data_.size() > kMaxPickleBytes) {
      fail("it is " + std::to_string(data_.size()) + " bytes, more than any ncclUniqueId pickle");
    }
    for (;;) {
      const std::size_t at = pos_;
      const auto op = static_cast<std::uint8_t>(take(1)[0]);
      switch (op) {
        case 0x80: {  // PROTO
          const auto version = static_cast<std::uint8_t>(take(1)[0]);
          if (version < 3 || version > 5) {
            fail("pickle protocol " + std::to_string(version) +
                 " is not read (vLLM's trainer writes 4, or 5 from Python 3.14; 3 also works)");
          }
          break;
        }
        case 0x95:
          take(8);
          break;  // FRAME: a length hint only
        case 0x8c:
          push_string(take(u8()));
          break;  // SHORT_BINUNICODE
        case 0x58:
          push_string(take(u32()));
          break;  // BINUNICODE
        case 0x43:
          push_bytes(take(u8()));
          break;  // SHORT_BINBYTES
        case 0x42:
          push_bytes(take(u32()));
          break;  // BINBYTES
        case 0x8e:
          push_bytes(take(u64()));
          break;  // BINBYTES8
        // Memo writes: nothing here reads the memo back (BINGET is not accepted), so only
        // their operands are checked.
        case 0x94:
          top(at);
          break;  // MEMOIZE
        case 0x71:
          u8(), top(at);
          break;  // BINPUT
        case 0x72:
          u32(), top(at);
          break;  // LONG_BINPUT
        case 0x7d:
          push({Value::Kind::kDict, {}, {}, {}});
          break;  // EMPTY_DICT
        case 0x29:
          push({Value::Kind::kTuple, {}, {}, {}});
          break;  // EMPTY_TUPLE
        case 0x28:
          push({Value::Kind::kMark, {}, {}, {}});
          break;  // MARK
        case 0x85:
          tuple_of(1, at);
          break;  // TUPLE1
        case 0x86:
          tuple_of(2, at);
          break;  // TUPLE2
        case 0x87:
          tuple_of(3, at);
          break;      // TUPLE3
        case 0x74: {  // TUPLE: items since the last mark
          std::size_t mark = stack_.size();
          while (mark > 0 && stack_[mark - 1].kind != Value::Kind::kMark)
            --mark;
          if (mark == 0) fail_at(at, op, "TUPLE without a MARK");
          Value t{Value::Kind::kTuple, {}, {}, {}};
          t.items.assign(stack_.begin() + static_cast<long>(mark), stack_.end());
          stack_.resize(mark - 1);
          push(std::move(t));
          break;
        }
        case 0x63: {  // GLOBAL: "module\nname\n"
          std::string module = line(at, op), name = line(at, op);
          push({Value::Kind::kGlobal, module, name, {}});
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Value name = pop(at, op), module = pop(at, op);
          if (name.kind != Value::Kind::kString || module.kind != Value::Kind::kString) {
            fail_at(at, op,
                    "STACK_GLOBAL needs two strings, got " + describe(module) + " and " +
                        describe(name));
          }
          push({Value::Kind::kGlobal, module.text, name.text, {}});
          break;
        }
        case 0x52: {  // REDUCE
          Value args = pop(at, op), callable = pop(at, op);
          if (callable.kind != Value::Kind::kGlobal || args.kind != Value::Kind::kTuple) {
            fail_at(at, op,
                    "REDUCE needs a global and a tuple, got " + describe(callable) + " and " +
                        describe(args));
          }
          push({Value::Kind::kReduced, {}, {}, {std::move(callable), std::move(args)}});
          break;
        }
        case 0x2e: {  // STOP
          if (stack_.size() != 1) {
            fail_at(at, op, "STOP with " + std::to_string(stack_.size()) + " values on the stack");
          }
          if (pos_ != data_.size()) {
            fail(std::to_string(data_.size() - pos_) + " bytes follow the STOP opcode");
          }
          return std::move(stack_.back());
        }
        default:
          fail_at(at, op, "an opcode vLLM's ncclUniqueId pickle never uses");
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw protocol::ValueError("not a pickled vLLM ncclUniqueId: " + why);
  }
  [[noreturn]] void fail_at(std::size_t at, std::uint8_t op, const std::string& why) const {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", op);
    fail("opcode " + std::string(hex) + " at byte " + std::to_string(at) + ": " + why);
  }

  std::string_view take(std::uint64_t n) {
    if (n > data_.size() - pos_) {
      fail("it ends at byte " + std::to_string(data_.size()) + ", in the middle of an opcode");
    }
    auto out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  template <class T>
  T little_endian() {
    auto bytes = take(sizeof(T));
    T value = 0;
    for (std::size_t i = sizeof(T); i-- > 0;)
      value = static_cast<T>((value << 8) | static_cast<std::uint8_t>(bytes[i]));
    return value;
  }
  std::uint64_t u8() { return little_endian<std::uint8_t>(); }
  std::uint64_t u32() { return little_endian<std::uint32_t>(); }
  std::uint64_t u64() { return little_endian<std::uint64_t>(); }
  std::string line(std::size_t at, std::uint8_t op) {
    auto end = data_.find('\n', pos_);
    if (end == std::string_view::npos) fail_at(at, op, "GLOBAL without its newline");
    std::string out(data_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }

  void push(Value v) {
    if (stack_.size() >= kMaxStackDepth) fail("its stack grows deeper than any ncclUniqueId's");
    stack_.push_back(std::move(v));
  }
  void push_string(std::string_view s) { push({Value::Kind::kString, std::string(s), {}, {}}); }
  void push_bytes(std::string_view s) { push({Value::Kind::kBytes, std::string(s), {}, {}}); }
  Value pop(std::size_t at, std::uint8_t op) {
    if (stack_.empty() || stack_.back().kind == Value::Kind::kMark) {
      fail_at(at, op, "the stack holds too few values");
    }
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const Value& top(std::size_t at) const {
    if (stack_.empty()) fail_at(at, static_cast<std::uint8_t>(data_[at]), "memo of nothing");
    return stack_.back();
  }
  void tuple_of(std::size_t n, std::size_t at) {
    const auto op = static_cast<std::uint8_t>(data_[at]);
    Value t{Value::Kind::kTuple, {}, {}, std::vector<Value>(n)};
    for (std::size_t i = n; i-- > 0;)
      t.items[i] = pop(at, op);
    push(std::move(t));
  }

  std::string_view data_;
  std::size_t pos_ = 0;
  std::vector<Value> stack_;
};

}  // namespace

std::string stateless_broadcast_key(int src, int counter) {
  return "broadcast_from/" + std::to_string(src) + "/" + std::to_string(counter);
}

NcclUniqueId unique_id_from_pickle(std::string_view pickle) {
  const Value v = PickleWalker(pickle).run();
  // _ctypes._unpickle(<class>, ({}, <128 bytes>))
  const bool shape_ok = v.kind == Value::Kind::kReduced && v.items[0].text == "_ctypes" &&
                        v.items[0].name == "_unpickle" && v.items[1].items.size() == 2 &&
                        v.items[1].items[0].kind == Value::Kind::kGlobal &&
                        v.items[1].items[1].kind == Value::Kind::kTuple &&
                        v.items[1].items[1].items.size() == 2 &&
                        v.items[1].items[1].items[0].kind == Value::Kind::kDict &&
                        v.items[1].items[1].items[1].kind == Value::Kind::kBytes;
  if (!shape_ok) {
    throw protocol::ValueError(
        "not a pickled vLLM ncclUniqueId: expected _ctypes._unpickle(<class>, ({}, <128 bytes>)), "
        "got " +
        describe(v));
  }
  const std::string& raw = v.items[1].items[1].items[1].text;
  if (raw.size() != kNcclUniqueIdBytes) {
    throw protocol::ValueError("the pickled ncclUniqueId holds " + std::to_string(raw.size()) +
                               " bytes; an NCCL unique id is " +
                               std::to_string(kNcclUniqueIdBytes));
  }
  NcclUniqueId id{};
  std::memcpy(id.data(), raw.data(), id.size());
  return id;
}

std::string pickle_unique_id(const NcclUniqueId& id, std::string_view class_module,
                             std::string_view class_name) {
  if (class_module.size() > 255 || class_name.size() > 255) {
    throw protocol::ValueError("a class path component longer than 255 characters");
  }
  auto short_string = [](std::string_view s) {
    return std::string(1, '\x8c') + static_cast<char>(s.size()) + std::string(s) + '\x94';
  };
  // The frame: everything after the FRAME header, up to and including STOP.
  std::string body = short_string("_ctypes") + short_string("_unpickle") + "\x93\x94" +
                     short_string(class_module) + short_string(class_name) + "\x93\x94" + "}\x94" +
                     "C\x80" + std::string(reinterpret_cast<const char*>(id.data()), id.size()) +
                     "\x94\x86\x94\x86\x94R\x94.";
  std::string out = "\x80\x04\x95";
  std::uint64_t length = body.size();
  for (int i = 0; i < 8; ++i)
    out += static_cast<char>((length >> (8 * i)) & 0xff);
  return out + body;
}

}  // namespace hotswap::transport
