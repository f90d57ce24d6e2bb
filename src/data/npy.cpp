#include "data/npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "error.h"

namespace mlip::data {

namespace {

bool host_is_little_endian() {
  const uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

/// The dict literal of a .npy header,
/// e.g. {'descr': '<f8', 'fortran_order': False, 'shape': (3,), }
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), text_(text) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key = read_quoted();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"') {
          // A list of fields: a structured dtype.
          size_t start = pos_;
          skip_value();
          fail("unsupported dtype '" + text_.substr(start, pos_ - start) +
               "' (expected float32/float64 or int32/int64)");
        }
        h.descr = read_quoted();
        have_descr = true;
      } else if (key == "fortran_order") {
        std::string word = read_word();
        if (word == "True") {
          h.fortran_order = true;
        } else if (word == "False") {
          h.fortran_order = false;
        } else {
          fail("header key 'fortran_order': expected True or False, got '" + word + "'");
        }
        have_order = true;
      } else if (key == "shape") {
        h.shape = read_shape();
        have_shape = true;
      } else {
        skip_value();
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      if (peek() == '}') break;
      fail("malformed header: expected ',' or '}' at offset " + std::to_string(pos_));
    }
    if (!have_descr) fail("malformed header: no 'descr' key");
    if (!have_order) fail("malformed header: no 'fortran_order' key");
    if (!have_shape) fail("malformed header: no 'shape' key");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ": " + what + " (header: " + trimmed_text() + ")");
  }
  std::string trimmed_text() const {
    std::string t = text_;
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
    return t;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) {
      fail(std::string("malformed header: expected '") + c + "' at offset " +
           std::to_string(pos_));
    }
    ++pos_;
  }
  std::string read_quoted() {
    char q = peek();
    if (q != '\'' && q != '"') {
      fail("malformed header: expected a quoted string at offset " + std::to_string(pos_));
    }
    ++pos_;
    size_t end = text_.find(q, pos_);
    if (end == std::string::npos) fail("malformed header: unterminated string");
    std::string s = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  std::string read_word() {
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '_')) {
      ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }
  std::vector<int64_t> read_shape() {
    std::vector<int64_t> shape;
    expect('(');
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      std::string word = read_word();
      // Python 2 numpy wrote long integers as e.g. "3L".
      if (!word.empty() && (word.back() == 'L' || word.back() == 'l')) word.pop_back();
      if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos ||
          word.size() > 18) {
        fail("header key 'shape': expected a tuple of non-negative integers");
      }
      shape.push_back(std::stoll(word));
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        fail("header key 'shape': expected a tuple of non-negative integers");
      }
    }
    return shape;
  }
  /// Skips a value of an unknown key: a string, a bracketed expression or a bare word.
  void skip_value() {
    char c = peek();
    if (c == '\'' || c == '"') {
      read_quoted();
      return;
    }
    if (c == '(' || c == '[' || c == '{') {
      int depth = 0;
      while (pos_ < text_.size()) {
        char d = text_[pos_];
        if (d == '\'' || d == '"') {
          read_quoted();
          continue;
        }
        if (d == '(' || d == '[' || d == '{') ++depth;
        if (d == ')' || d == ']' || d == '}') --depth;
        ++pos_;
        if (depth == 0) return;
      }
      fail("malformed header: unbalanced brackets");
    }
    read_word();
  }

  const std::string& path_;
  const std::string& text_;
  size_t pos_ = 0;
};

uint64_t read_le(const unsigned char* p, int nbytes) {
  uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

int64_t NpyArray::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(path + ": cannot open file (" + std::strerror(errno) + ")");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes.data());

  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 6 || std::memcmp(bytes.data(), kMagic, 6) != 0) {
    throw Error(path + ": not a .npy file (bad magic bytes; expected \\x93NUMPY, file is " +
                std::to_string(bytes.size()) + " bytes)");
  }
  if (bytes.size() < 10) {
    throw Error(path + ": truncated: " + std::to_string(bytes.size()) +
                " bytes, shorter than the .npy preamble");
  }
  const int major = raw[6], minor = raw[7];
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = read_le(raw + 8, 2);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) {
      throw Error(path + ": truncated: " + std::to_string(bytes.size()) +
                  " bytes, shorter than the .npy preamble");
    }
    header_len = read_le(raw + 8, 4);
    header_start = 12;
  } else {
    throw Error(path + ": unsupported .npy format version " + std::to_string(major) + "." +
                std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  }
  if (bytes.size() < header_start + header_len) {
    throw Error(path + ": truncated: header length is " + std::to_string(header_len) +
                " bytes but only " + std::to_string(bytes.size() - header_start) + " bytes follow");
  }
  const std::string header_text = bytes.substr(header_start, header_len);
  NpyHeader h = HeaderParser(path, header_text).parse();

  // dtype: byte order, kind, item size.
  const std::string& d = h.descr;
  const std::string unsupported =
      path + ": unsupported dtype '" + d + "' (expected float32/float64 or int32/int64)";
  if (d.size() < 3) throw Error(unsupported);
  char order = d[0];
  char kind = d[1];
  std::string size_text = d.substr(2);
  if (order != '<' && order != '>' && order != '=' && order != '|') throw Error(unsupported);
  if (size_text != "4" && size_text != "8") throw Error(unsupported);
  if (kind != 'f' && kind != 'i') throw Error(unsupported);
  if (order == '|') throw Error(unsupported);  // '|' is only used for one-byte types
  const int itemsize = size_text == "4" ? 4 : 8;
  const bool file_little = order == '<' || (order == '=' && host_is_little_endian());
  const bool swap = file_little != host_is_little_endian();

  NpyArray a;
  a.shape = h.shape;
  a.dtype = d;
  // Element count with overflow check.
  uint64_t count = 1;
  for (int64_t dim : h.shape) {
    const uint64_t limit = std::numeric_limits<uint64_t>::max() / 16;
    if (dim != 0 && count > limit / static_cast<uint64_t>(dim)) {
      throw Error(path + ": shape " + shape_string(h.shape) + " is too large");
    }
    count *= static_cast<uint64_t>(dim);
  }
  const uint64_t data_start = header_start + header_len;
  const uint64_t available = bytes.size() - data_start;
  const uint64_t needed = count * itemsize;
  if (available < needed) {
    const char* type_name = kind == 'f' ? (itemsize == 4 ? "float32" : "float64")
                                        : (itemsize == 4 ? "int32" : "int64");
    throw Error(path + ": truncated: header says " + std::to_string(count) + " " + type_name +
                " values (" + std::to_string(needed) + " bytes) but only " +
                std::to_string(available) + " bytes follow");
  }

  std::vector<double> values(count);
  const unsigned char* p = raw + data_start;
  unsigned char buf[8];
  for (uint64_t i = 0; i < count; ++i) {
    const unsigned char* src = p + i * itemsize;
    for (int b = 0; b < itemsize; ++b) buf[b] = swap ? src[itemsize - 1 - b] : src[b];
    if (kind == 'f' && itemsize == 4) {
      float v;
      std::memcpy(&v, buf, 4);
      values[i] = v;
    } else if (kind == 'f') {
      double v;
      std::memcpy(&v, buf, 8);
      values[i] = v;
    } else if (itemsize == 4) {
      int32_t v;
      std::memcpy(&v, buf, 4);
      values[i] = v;
    } else {
      int64_t v;
      std::memcpy(&v, buf, 8);
      values[i] = static_cast<double>(v);
    }
  }

  if (h.fortran_order && h.shape.size() > 1) {
    // Fortran order: the first index varies fastest. Transpose to C order.
    const size_t nd = h.shape.size();
    std::vector<uint64_t> fstride(nd);
    uint64_t s = 1;
    for (size_t k = 0; k < nd; ++k) {
      fstride[k] = s;
      s *= static_cast<uint64_t>(h.shape[k]);
    }
    std::vector<double> c_order(count);
    std::vector<int64_t> idx(nd, 0);
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t f = 0;
      for (size_t k = 0; k < nd; ++k) f += static_cast<uint64_t>(idx[k]) * fstride[k];
      c_order[i] = values[f];
      for (size_t k = nd; k-- > 0;) {
        if (++idx[k] < h.shape[k]) break;
        idx[k] = 0;
      }
    }
    values.swap(c_order);
  }
  a.values = std::move(values);
  return a;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const std::vector<double>& values) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error(path + ": cannot write shape " + shape_string(shape) + " (negative)");
    count *= d;
  }
  if (count != static_cast<int64_t>(values.size())) {
    throw Error(path + ": cannot write shape " + shape_string(shape) + ": expected " +
                std::to_string(count) + " values, got " + std::to_string(values.size()));
  }
  std::ostringstream dict;
  dict << "{'descr': '<f8', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) dict << ",";
  dict << "), }";
  std::string header = dict.str();
  // Pad with spaces so that magic + version + length + header is a multiple of 64, ending in '\n'.
  const size_t preamble = 10;
  size_t total = preamble + header.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  header.append(padded - total, ' ');
  header.push_back('\n');

  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path + ": cannot open for writing (" + std::strerror(errno) + ")");
  out.write("\x93NUMPY", 6);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const bool little = host_is_little_endian();
  for (double v : values) {
    char b[8];
    std::memcpy(b, &v, 8);
    if (!little) {
      for (int i = 0; i < 4; ++i) std::swap(b[i], b[7 - i]);
    }
    out.write(b, 8);
  }
  if (!out) throw Error(path + ": write failed (" + std::strerror(errno) + ")");
}

}  // namespace mlip::data
