#include "data/npy.h"

#include <unistd.h>

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

NpyFile open_npy(const std::string& path) {
  const OpenedFile opened(path);
  const int fd = opened.fd();
  const uint64_t file_size = uint64_t(opened.identity().size);
  unsigned char pre[12] = {};
  const ssize_t got = ::pread(fd, pre, sizeof pre, 0);
  if (got < 0) throw Error(path + ": cannot read file (" + std::strerror(errno) + ")");

  static const char kMagic[] = "\x93NUMPY";
  if (file_size < 6 || std::memcmp(pre, kMagic, 6) != 0) {
    throw Error(path + ": not a .npy file (bad magic bytes; expected \\x93NUMPY, file is " +
                std::to_string(file_size) + " bytes)");
  }
  if (file_size < 10) {
    throw Error(path + ": truncated: " + std::to_string(file_size) + " bytes, shorter than the .npy preamble");
  }
  const int major = pre[6], minor = pre[7];
  uint64_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = read_le(pre + 8, 2);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (file_size < 12) {
      throw Error(path + ": truncated: " + std::to_string(file_size) + " bytes, shorter than the .npy preamble");
    }
    header_len = read_le(pre + 8, 4);
    header_start = 12;
  } else {
    throw Error(path + ": unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                " (expected 1.0, 2.0 or 3.0)");
  }
  if (file_size < header_start + header_len) {
    throw Error(path + ": truncated: header length is " + std::to_string(header_len) + " bytes but only " +
                std::to_string(file_size - header_start) + " bytes follow");
  }
  std::string header_text(header_len, '\0');
  if (header_len > 0 && ::pread(fd, header_text.data(), header_len, off_t(header_start)) != ssize_t(header_len))
    throw Error(path + ": cannot read the header (" + std::strerror(errno) + ")");
  NpyHeader h = HeaderParser(path, header_text).parse();

  // dtype: byte order, kind, item size.
  const std::string& d = h.descr;
  const std::string unsupported = path + ": unsupported dtype '" + d + "' (expected float32/float64 or int32/int64)";
  if (d.size() < 3) throw Error(unsupported);
  const char order = d[0];
  const char kind = d[1];
  const std::string size_text = d.substr(2);
  if (order != '<' && order != '>' && order != '=' && order != '|') throw Error(unsupported);
  if (size_text != "4" && size_text != "8") throw Error(unsupported);
  if (kind != 'f' && kind != 'i') throw Error(unsupported);
  if (order == '|') throw Error(unsupported);  // '|' is only used for one-byte types

  NpyFile file;
  file.path = path;
  file.identity = opened.identity();
  file.shape = h.shape;
  file.dtype = d;
  file.fortran_order = h.fortran_order;
  file.is_float = kind == 'f';
  file.itemsize = size_text == "4" ? 4 : 8;
  const bool file_little = order == '<' || (order == '=' && host_is_little_endian());
  file.swap_bytes = file_little != host_is_little_endian();
  // Element count with overflow check.
  uint64_t count = 1;
  for (int64_t dim : h.shape) {
    const uint64_t limit = std::numeric_limits<uint64_t>::max() / 16;
    if (dim != 0 && count > limit / static_cast<uint64_t>(dim)) {
      throw Error(path + ": shape " + shape_string(h.shape) + " is too large");
    }
    count *= static_cast<uint64_t>(dim);
  }
  file.data_offset = header_start + header_len;
  const uint64_t available = file_size - file.data_offset;
  const uint64_t needed = count * uint64_t(file.itemsize);
  if (available < needed) {
    const char* type_name = file.is_float ? (file.itemsize == 4 ? "float32" : "float64")
                                          : (file.itemsize == 4 ? "int32" : "int64");
    throw Error(path + ": truncated: header says " + std::to_string(count) + " " + type_name + " values (" +
                std::to_string(needed) + " bytes) but only " + std::to_string(available) + " bytes follow");
  }
  return file;
}

int64_t NpyFile::rows() const { return shape.empty() ? 1 : shape[0]; }

int64_t NpyFile::row_size() const {
  int64_t n = 1;
  for (size_t k = 1; k < shape.size(); ++k) n *= shape[k];
  return n;
}

std::vector<double> read_npy_rows(const NpyFile& file, int64_t first, int64_t count) {
  const int64_t row = file.row_size();
  if (first < 0 || count < 0 || first + count > file.rows())
    throw Error(file.path + ": rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                ") are outside the array's " + std::to_string(file.rows()) + " rows");
  std::vector<double> values(size_t(count * row));
  if (values.empty()) return values;
  const OpenedFile opened(file.path, file.identity);
  const int fd = opened.fd();
  const int item = file.itemsize;
  std::vector<unsigned char> bytes(size_t(count) * size_t(item));
  auto read_at = [&](unsigned char* to, size_t nbytes, uint64_t offset) {
    size_t done = 0;
    while (done < nbytes) {
      const ssize_t r = ::pread(fd, to + done, nbytes - done, off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw Error(file.path + ": cannot read " + std::to_string(nbytes) + " bytes at offset " +
                    std::to_string(offset) + (r < 0 ? " (" + std::string(std::strerror(errno)) + ")" : " (the file ends there)"));
      done += size_t(r);
    }
  };
  auto convert = [&](const unsigned char* src) {
    unsigned char buf[8];
    for (int b = 0; b < item; ++b) buf[b] = file.swap_bytes ? src[item - 1 - b] : src[b];
    if (file.is_float && item == 4) {
      float v;
      std::memcpy(&v, buf, 4);
      return double(v);
    }
    if (file.is_float) {
      double v;
      std::memcpy(&v, buf, 8);
      return v;
    }
    if (item == 4) {
      int32_t v;
      std::memcpy(&v, buf, 4);
      return double(v);
    }
    int64_t v;
    std::memcpy(&v, buf, 8);
    return double(v);
  };
  if (!file.fortran_order || file.shape.size() <= 1) {
    // C order: the rows are contiguous.
    bytes.resize(size_t(count * row) * size_t(item));
    read_at(bytes.data(), bytes.size(), file.data_offset + uint64_t(first * row) * uint64_t(item));
    for (size_t k = 0; k < values.size(); ++k) values[k] = convert(bytes.data() + k * size_t(item));
    return values;
  }
  // Fortran order: the first index varies fastest, so each of the row_size columns holds the
  // requested rows contiguously; column c (the C-order index within a row) starts at
  // c' * rows, where c' is c's Fortran-order index among the trailing dimensions.
  const size_t nd = file.shape.size();
  for (int64_t c = 0; c < row; ++c) {
    // C-order index c over shape[1..] -> Fortran-order position among the trailing dimensions.
    int64_t rem = c, fpos = 0, stride = 1;
    std::vector<int64_t> sub(nd, 0);
    for (size_t k = nd; k-- > 1;) {
      sub[k] = rem % file.shape[k];
      rem /= file.shape[k];
    }
    for (size_t k = 1; k < nd; ++k) {
      fpos += sub[k] * stride;
      stride *= file.shape[k];
    }
    read_at(bytes.data(), bytes.size(), file.data_offset + uint64_t(fpos * file.rows() + first) * uint64_t(item));
    for (int64_t r = 0; r < count; ++r) values[size_t(r * row + c)] = convert(bytes.data() + size_t(r) * size_t(item));
  }
  return values;
}

NpyArray read_npy(const std::string& path) {
  const NpyFile file = open_npy(path);
  NpyArray a;
  a.shape = file.shape;
  a.dtype = file.dtype;
  a.values = read_npy_rows(file, 0, file.rows());
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
