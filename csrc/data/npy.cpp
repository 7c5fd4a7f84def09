// .npy arrays, and .npz archives of them (np.savez: stored; np.savez_compressed: deflate, via zlib).
#include <ATen/ops/empty.h>
#include <c10/util/accumulate.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <cctype>
#include <iterator>

#include "gpucore/data/readers.h"
#include "gpucore/errors.h"

namespace gpucore {

namespace {

std::vector<unsigned char> read_bytes(const std::string& path, const std::string& kind) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ConfigError("cannot open " + kind + " file '" + path + "'");
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(file), {});
}

// Header text as it can go into an error message: bytes outside printable ASCII as \xNN (an error
// message must be valid UTF-8 to reach Python).
std::string printable(const std::string& text) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return text.size() > 200 ? out + "..." : out;
}

// Member names become Python strings: they must be UTF-8 (a flipped bit in one is corruption).
bool valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return false;
    }
    i += length;
  }
  return true;
}

bool all_digits(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// What the header's dict literal says, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }".
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Reads the header by NumPy's rules (np.load evaluates it as a Python literal, then checks it): a dict with exactly
// the keys 'descr' (a string), 'fortran_order' (True or False) and 'shape' (a tuple of non-negative integers), and
// nothing but whitespace after it. Written as a small tokenizer rather than a search for each key, so that a file
// NumPy refuses (a flipped bit in a keyword, garbage after the dict, a missing brace) is refused here too.
// Hand-parsed: std::regex would be shorter, but its template code is also instantiated inside libtorch, and a
// torch built by another compiler resolves our copies to its own and crashes (seen with torch 2.11 built by GCC 13.3).
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& text, const std::string& name) : text_(text), name_(name) {}

  NpyHeader parse() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t')) ++at_;  // ast.literal_eval's lstrip
    expect('{', "a dict literal starting with '{'");
    NpyHeader header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal("a quoted key");
      skip_space();
      expect(':', "':' after the key '" + key + "'");
      skip_space();
      if (key == "descr") {
        header.descr = string_literal("the dtype string of 'descr'");
        seen_descr = true;
      } else if (key == "fortran_order") {
        const std::string word = identifier();
        if (word != "True" && word != "False") fail("'fortran_order' must be True or False, not '" + word + "'");
        header.fortran_order = word == "True";
        seen_order = true;
      } else if (key == "shape") {
        header.shape = shape_tuple();
        seen_shape = true;
      } else {
        fail("the key '" + key + "' is not one of 'descr', 'fortran_order', 'shape'");
      }
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      if (peek() != '}') fail("',' or '}' after the value of '" + key + "'");
    }
    ++at_;
    while (at_ < text_.size() && std::string(" \t\n\r\f").find(text_[at_]) != std::string::npos) ++at_;
    if (at_ != text_.size()) fail("nothing but whitespace after the dict's closing '}'");
    if (!seen_descr || !seen_order || !seen_shape) fail("all three keys 'descr', 'fortran_order' and 'shape'");
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& wanted) const {
    throw ConfigError(".npy file '" + name_ + "' has a corrupt header (NumPy would refuse it too): expected " + wanted +
                      " at character " + std::to_string(at_) + " of " + printable(text_));
  }
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  void expect(char c, const std::string& wanted) {
    if (peek() != c) fail(wanted);
    ++at_;
  }
  // Whitespace a Python tokenizer skips inside brackets.
  void skip_space() {
    while (at_ < text_.size() && std::string(" \t\n\r\f").find(text_[at_]) != std::string::npos) ++at_;
  }
  // 'text' or "text", printable ASCII without escapes (all np.save writes).
  std::string string_literal(const std::string& wanted) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(wanted);
    const size_t begin = ++at_;
    while (at_ < text_.size() && text_[at_] != quote) {
      const auto c = static_cast<unsigned char>(text_[at_]);
      if (c < 0x20 || c >= 0x7f || c == '\\') fail(wanted + " (plain printable characters, closed by " + quote + ")");
      ++at_;
    }
    if (at_ == text_.size()) fail(wanted + " closed by " + quote);
    return text_.substr(begin, at_++ - begin);
  }
  std::string identifier() {
    const size_t begin = at_;
    while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) || text_[at_] == '_')) ++at_;
    return text_.substr(begin, at_ - begin);
  }
  // "()", "(7,)", "(3, 5)" or "(3, 5,)"; a single dimension needs its comma ("(7)" is an int in Python, not a tuple).
  std::vector<int64_t> shape_tuple() {
    expect('(', "a tuple for 'shape'");
    std::vector<int64_t> shape;
    int64_t elements = 1;
    bool comma_after_last = false;
    while (true) {
      skip_space();
      if (peek() == ')') break;
      const size_t begin = at_;
      while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) ++at_;
      const std::string digits = text_.substr(begin, at_ - begin);
      // Python refuses leading zeros ("07"), except in zero itself ("00").
      const bool python_int = all_digits(digits) && (digits[0] != '0' || digits.find_first_not_of('0') == std::string::npos);
      if (!python_int || std::isalpha(static_cast<unsigned char>(peek())) || peek() == '_') {
        fail("a non-negative integer dimension in 'shape'");
      }
      if (digits.size() > 15) fail("a dimension below 10^15 in 'shape'");
      const int64_t dim = std::stoll(digits);
      if (dim > 0 && elements > (int64_t{1} << 50) / dim) fail("a shape whose size can exist");
      elements *= dim;
      shape.push_back(dim);
      skip_space();
      comma_after_last = peek() == ',';
      if (comma_after_last) {
        ++at_;
      } else if (peek() != ')') {
        fail("',' or ')' in 'shape'");
      }
    }
    if (shape.size() == 1 && !comma_after_last) fail("a tuple for 'shape': one dimension is written (n,)");
    ++at_;
    return shape;
  }

  const std::string& text_;
  const std::string& name_;
  size_t at_ = 0;
};

// One .npy image in memory; `name` says where it came from in errors.
at::Tensor parse_npy(const unsigned char* data, size_t size, const std::string& name) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) {
    throw ConfigError("'" + name + "' is not a .npy file (no \\x93NUMPY magic)");
  }
  if (data[6] < 1 || data[6] > 3 || data[7] != 0) {
    throw ConfigError(".npy file '" + name + "' has format version " + std::to_string(data[6]) + "." +
                      std::to_string(data[7]) + "; gpucore reads versions 1.0, 2.0 and 3.0, as NumPy does");
  }
  const size_t size_width = data[6] == 1 ? 2 : 4;  // versions 2 and 3: a 4-byte header length
  if (size < 8 + size_width) throw ConfigError(".npy file '" + name + "' is truncated in its header");
  size_t header_size = 0;
  for (size_t i = size_width; i-- > 0;) header_size = (header_size << 8) | data[8 + i];
  const size_t header_begin = 8 + size_width;
  if (header_begin + header_size > size) throw ConfigError(".npy file '" + name + "' is truncated in its header");
  const std::string header(reinterpret_cast<const char*>(data) + header_begin, header_size);

  if (header.size() > 10000) {
    throw ConfigError(".npy file '" + name + "' has a header of " + std::to_string(header.size()) +
                      " bytes; NumPy refuses headers over 10000 bytes as unsafe, and so does gpucore");
  }
  const NpyHeader fields = NpyHeaderParser(header, name).parse();
  const std::string& descr = fields.descr;
  if (descr.size() < 3 || descr.size() > 4 || std::string("<>|=").find(descr[0]) == std::string::npos ||
      !std::islower(static_cast<unsigned char>(descr[1])) || !all_digits(descr.substr(2))) {
    throw ConfigError(".npy file '" + name + "' holds dtype '" + printable(descr) +
                      "', which gpucore does not read (it reads b1, u1, i1, i2, i4, i8, f2, f4, f8)");
  }
  const char order = descr[0];
  const std::string kind(1, descr[1]);
  const int width = std::stoi(descr.substr(2));
  if (order == '>' && width > 1) throw ConfigError(".npy file '" + name + "' is big-endian; save it little-endian");
  at::ScalarType type;
  const std::string code = kind + std::to_string(width);
  if (code == "b1") type = at::kBool;
  else if (code == "u1") type = at::kByte;
  else if (code == "i1") type = at::kChar;
  else if (code == "i2") type = at::kShort;
  else if (code == "i4") type = at::kInt;
  else if (code == "i8") type = at::kLong;
  else if (code == "f2") type = at::kHalf;
  else if (code == "f4") type = at::kFloat;
  else if (code == "f8") type = at::kDouble;
  else throw ConfigError(".npy file '" + name + "' holds dtype " + code + ", which gpucore does not read");
  if (fields.fortran_order) {
    throw ConfigError(".npy file '" + name + "' is in Fortran order; save it with np.ascontiguousarray");
  }
  const std::vector<int64_t>& shape = fields.shape;
  // Checked before allocating: a corrupt header cannot make gpucore allocate what the file does not hold
  // (the parser bounds the element count).
  const size_t expected = static_cast<size_t>(c10::multiply_integers(shape)) * width;
  const size_t held = size - header_begin - header_size;
  if (held < expected) {
    throw ConfigError(".npy file '" + name + "' is truncated: shape " + c10::str(c10::IntArrayRef(shape)) + " needs " +
                      std::to_string(expected) + " bytes of data, the file holds " + std::to_string(held));
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(type));
  std::memcpy(out.data_ptr(), data + header_begin + header_size, expected);
  return out;
}

uint32_t le32(const unsigned char* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

std::vector<unsigned char> inflate_raw(const unsigned char* data, size_t size, size_t expected, const std::string& name) {
  std::vector<unsigned char> out(expected);
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) throw ConfigError("zlib cannot start inflating '" + name + "'");
  stream.next_in = const_cast<unsigned char*>(data);
  stream.avail_in = static_cast<uInt>(size);
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(expected);
  const int status = inflate(&stream, Z_FINISH);
  const size_t produced = stream.total_out;
  inflateEnd(&stream);
  if (status != Z_STREAM_END || produced != expected) {
    throw ConfigError("'" + name + "' is corrupt: its compressed data does not inflate to " +
                      std::to_string(expected) + " bytes");
  }
  return out;
}

}  // namespace

at::Tensor read_npy(const std::string& path) {
  const std::vector<unsigned char> bytes = read_bytes(path, ".npy");
  return parse_npy(bytes.data(), bytes.size(), path);
}

std::vector<std::pair<std::string, at::Tensor>> read_npz(const std::string& path) {
  const std::vector<unsigned char> bytes = read_bytes(path, ".npz");
  const size_t size = bytes.size();
  // The end-of-central-directory record: 22 bytes plus a comment of at most 64 KiB, at the end.
  size_t end = size;
  for (size_t at = size >= 22 ? size - 22 + 1 : 0; at-- > 0 && size - at <= 22 + 0xFFFF;) {
    if (le32(&bytes[at]) == 0x06054b50) {
      end = at;
      break;
    }
  }
  if (end == size) throw ConfigError("'" + path + "' is not a .npz file (no zip directory at its end)");
  const uint16_t entries = le16(&bytes[end + 10]);
  const uint32_t directory = le32(&bytes[end + 16]);
  if (directory == 0xFFFFFFFFu || entries == 0xFFFF) {
    throw ConfigError(".npz file '" + path + "' is a ZIP64 archive (over 4 GiB), which gpucore does not read; save "
                      "the arrays as .npy files");
  }
  std::vector<std::pair<std::string, at::Tensor>> arrays;
  size_t entry = directory;
  for (uint16_t i = 0; i < entries; ++i) {
    if (entry + 46 > size || le32(&bytes[entry]) != 0x02014b50) {
      throw ConfigError(".npz file '" + path + "' is corrupt: bad zip directory entry " + std::to_string(i));
    }
    const uint16_t method = le16(&bytes[entry + 10]);
    const uint32_t crc = le32(&bytes[entry + 16]), packed = le32(&bytes[entry + 20]), unpacked = le32(&bytes[entry + 24]);
    const uint16_t name_length = le16(&bytes[entry + 28]);
    const size_t next = entry + 46 + name_length + le16(&bytes[entry + 30]) + le16(&bytes[entry + 32]);
    const size_t local = le32(&bytes[entry + 42]);  // size_t: local + 30 must not wrap
    if (next > size) throw ConfigError(".npz file '" + path + "' is truncated in its zip directory");
    std::string member(reinterpret_cast<const char*>(&bytes[entry + 46]), name_length);
    const std::string where = path + ":" + printable(member);
    if (local + 30 > size || le32(&bytes[local]) != 0x04034b50) {
      throw ConfigError(".npz file '" + path + "' is corrupt: no local header for '" + printable(member) + "'");
    }
    const size_t local_name_length = le16(&bytes[local + 26]);
    if (local_name_length != name_length || local + 30 + local_name_length > size ||
        std::memcmp(&bytes[local + 30], &bytes[entry + 46], name_length) != 0 || !valid_utf8(member)) {
      throw ConfigError(".npz file '" + path + "' is corrupt: the name of member " + std::to_string(i) + " ('" +
                        printable(member) + "') differs between its zip directory and its local header, or is not UTF-8");
    }
    const size_t begin = local + 30 + local_name_length + le16(&bytes[local + 28]);
    if (begin + packed > size) throw ConfigError(".npz member '" + where + "' is truncated");
    std::vector<unsigned char> inflated;
    const unsigned char* data = &bytes[begin];
    if (method == 0 && unpacked != packed) {
      throw ConfigError(".npz member '" + where + "' is corrupt: stored with " + std::to_string(packed) +
                        " bytes but its zip directory says " + std::to_string(unpacked));
    }
    // Deflate shrinks data at most ~1032:1; a larger claim is a corrupt directory, refused before allocating.
    if (method == 8 && static_cast<uint64_t>(unpacked) > static_cast<uint64_t>(packed) * 1032 + 1024) {
      throw ConfigError(".npz member '" + where + "' is corrupt: " + std::to_string(packed) +
                        " compressed bytes cannot inflate to the " + std::to_string(unpacked) + " its directory claims");
    }
    if (method == 8) {
      inflated = inflate_raw(data, packed, unpacked, where);
      data = inflated.data();
    } else if (method != 0) {
      throw ConfigError(".npz member '" + where + "' uses zip compression method " + std::to_string(method) +
                        "; gpucore reads stored and deflated members (np.savez, np.savez_compressed)");
    }
    if (crc32(0L, data, unpacked) != crc) throw ConfigError(".npz member '" + where + "' is corrupt (CRC mismatch)");
    if (member.size() > 4 && member.compare(member.size() - 4, 4, ".npy") == 0) member.resize(member.size() - 4);
    arrays.emplace_back(member, parse_npy(data, unpacked, where));
    entry = next;
  }
  return arrays;
}

}  // namespace gpucore
