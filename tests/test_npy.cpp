#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "data/npy.h"
#include "error.h"
#include "test_util.h"

using mlip::data::NpyArray;
using mlip::data::read_npy;
using mlip::data::write_npy;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

/// A .npy file image: magic, version, header length, the dict padded to 64 bytes, then data.
std::string npy_image(const std::string& dict, const std::string& data, int major = 1) {
  const size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  size_t total = preamble + header.size() + 1;
  header.append((total + 63) / 64 * 64 - total, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const size_t len = header.size();
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>((len >> 8) & 0xff));
  if (major != 1) {
    out.push_back(0);
    out.push_back(0);
  }
  return out + header + data;
}

/// Raw bytes of values as T, in little- or big-endian byte order.
template <typename T>
std::string pack(const std::vector<double>& values, bool big_endian) {
  std::string out;
  for (double v : values) {
    T x = static_cast<T>(v);
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    std::string bytes(b, sizeof(T));
    const uint16_t probe = 1;
    const bool host_little = *reinterpret_cast<const unsigned char*>(&probe) == 1;
    if (big_endian == host_little) bytes.assign(bytes.rbegin(), bytes.rend());
    out += bytes;
  }
  return out;
}

std::string error_of(const std::string& path) {
  try {
    read_npy(path);
  } catch (const mlip::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::vector<double> kSix = {1.5, -2.25, 3.0, 4.125, -5.5, 6.0};

}  // namespace

TEST(Npy, RoundTripFloat64) {
  TempDir tmp;
  const std::string p = tmp / "a.npy";
  write_npy(p, {2, 3}, kSix);
  NpyArray a = read_npy(p);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, "<f8");
  EXPECT_EQ(a.size(), 6);
  EXPECT_EQ(a.values, kSix);
}

TEST(Npy, RoundTripOneDimensionalAndScalar) {
  TempDir tmp;
  write_npy(tmp / "v.npy", {4}, {1, 2, 3, 4});
  NpyArray v = read_npy(tmp / "v.npy");
  EXPECT_EQ(v.shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(v.values, (std::vector<double>{1, 2, 3, 4}));

  write_npy(tmp / "s.npy", {}, {-7.5});
  NpyArray s = read_npy(tmp / "s.npy");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.size(), 1);
  EXPECT_EQ(s.values, (std::vector<double>{-7.5}));

  write_npy(tmp / "e.npy", {0, 3}, {});
  NpyArray e = read_npy(tmp / "e.npy");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(e.values.empty());
}

TEST(Npy, WrittenHeaderIsAlignedTo64Bytes) {
  TempDir tmp;
  write_npy(tmp / "a.npy", {2, 3}, kSix);
  std::ifstream in(tmp / "a.npy", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 10u);
  const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                            (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 6 * 8);
  EXPECT_NE(bytes.find("'shape': (2, 3)"), std::string::npos);
}

TEST(Npy, WriteRejectsWrongValueCount) {
  TempDir tmp;
  EXPECT_THROW(write_npy(tmp / "a.npy", {2, 3}, {1, 2}), mlip::Error);
}

TEST(Npy, ReadsFloat32LittleEndian) {
  TempDir tmp;
  write_text(tmp / "f4.npy",
             npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                       pack<float>(kSix, false)));
  NpyArray a = read_npy(tmp / "f4.npy");
  EXPECT_EQ(a.dtype, "<f4");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.values, kSix);  // all exactly representable in float32
}

TEST(Npy, ReadsBigEndianFloat64AndFloat32) {
  TempDir tmp;
  write_text(tmp / "f8.npy",
             npy_image("{'descr': '>f8', 'fortran_order': False, 'shape': (6,), }",
                       pack<double>(kSix, true)));
  EXPECT_EQ(read_npy(tmp / "f8.npy").values, kSix);
  write_text(tmp / "f4.npy",
             npy_image("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 2), }",
                       pack<float>(kSix, true)));
  NpyArray a = read_npy(tmp / "f4.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a.values, kSix);
}

TEST(Npy, ReadsIntegers) {
  TempDir tmp;
  const std::vector<double> ints = {0, 1, -2, 300000, 7, 2};
  write_text(tmp / "i4.npy",
             npy_image("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }",
                       pack<int32_t>(ints, false)));
  EXPECT_EQ(read_npy(tmp / "i4.npy").values, ints);
  write_text(tmp / "i8.npy",
             npy_image("{'descr': '>i8', 'fortran_order': False, 'shape': (2, 3), }",
                       pack<int64_t>(ints, true)));
  EXPECT_EQ(read_npy(tmp / "i8.npy").values, ints);
}

TEST(Npy, FortranOrderIsTransposedToCOrder) {
  TempDir tmp;
  // C-order matrix [[1, 2, 3], [4, 5, 6]] stored column-major: 1 4 2 5 3 6.
  write_text(tmp / "f.npy",
             npy_image("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }",
                       pack<double>({1, 4, 2, 5, 3, 6}, false)));
  NpyArray a = read_npy(tmp / "f.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.values, (std::vector<double>{1, 2, 3, 4, 5, 6}));

  // A 3-D array [2, 3, 2] with value 100*i + 10*j + k, stored with i fastest.
  std::vector<double> fortran;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) fortran.push_back(100 * i + 10 * j + k);
  write_text(tmp / "f3.npy",
             npy_image("{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3, 2), }",
                       pack<float>(fortran, true)));
  NpyArray b = read_npy(tmp / "f3.npy");
  ASSERT_EQ(b.values.size(), 12u);
  size_t n = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(b.values[n++], 100 * i + 10 * j + k);
}

TEST(Npy, ReadsFormatVersion2) {
  TempDir tmp;
  write_text(tmp / "v2.npy",
             npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
                       pack<double>(kSix, false), 2));
  EXPECT_EQ(read_npy(tmp / "v2.npy").values, kSix);
}

TEST(Npy, MatchesNumpyWrittenFiles) {
  TempDir tmp;
  const std::string script =
      "import numpy as np; a = np.arange(24, dtype=float).reshape(2, 3, 4) * 0.5 - 3; "
      "np.save('" + (tmp / "c8.npy") + "', a); "
      "np.save('" + (tmp / "be4.npy") + "', a.astype('>f4')); "
      "np.save('" + (tmp / "fo.npy") + "', np.asfortranarray(a)); "
      "np.save('" + (tmp / "fobe.npy") + "', np.asfortranarray(a).astype('>f8', order='F'))";
  auto r = mlip::test::run_command(std::string(MLIP_TEST_PYTHON) + " -c \"" + script + "\"");
  if (r.exit_code == 127 || r.err.find("No module named") != std::string::npos) {
    GTEST_SKIP() << MLIP_TEST_PYTHON << " with numpy not available: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> expected;
  for (int i = 0; i < 24; ++i) expected.push_back(i * 0.5 - 3);
  for (const char* name : {"c8.npy", "be4.npy", "fo.npy", "fobe.npy"}) {
    NpyArray a = read_npy(tmp / name);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3, 4})) << name;
    EXPECT_EQ(a.values, expected) << name;
  }
  EXPECT_EQ(read_npy(tmp / "be4.npy").dtype, ">f4");
}

TEST(Npy, ErrorMissingFile) {
  TempDir tmp;
  std::string msg = error_of(tmp / "nope.npy");
  EXPECT_NE(msg.find(tmp / "nope.npy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(Npy, ErrorBadMagic) {
  TempDir tmp;
  write_text(tmp / "x.npy", "this is a text file, not numpy\n");
  std::string msg = error_of(tmp / "x.npy");
  EXPECT_NE(msg.find(tmp / "x.npy" + ": not a .npy file (bad magic bytes"), std::string::npos)
      << msg;
  write_text(tmp / "empty.npy", "");
  EXPECT_NE(error_of(tmp / "empty.npy").find("bad magic"), std::string::npos);
}

TEST(Npy, ErrorTruncatedData) {
  TempDir tmp;
  std::string data = pack<double>(kSix, false);
  write_text(tmp / "t.npy", npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
                                      data.substr(0, 10)));
  std::string msg = error_of(tmp / "t.npy");
  EXPECT_NE(msg.find(tmp / "t.npy" +
                     ": truncated: header says 6 float64 values (48 bytes) but only 10 bytes "
                     "follow"),
            std::string::npos)
      << msg;
}

TEST(Npy, ErrorTruncatedHeader) {
  TempDir tmp;
  std::string image =
      npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", "");
  write_text(tmp / "h.npy", image.substr(0, 30));
  std::string msg = error_of(tmp / "h.npy");
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  write_text(tmp / "p.npy", std::string("\x93NUMPY\x01", 7));
  EXPECT_NE(error_of(tmp / "p.npy").find("truncated"), std::string::npos);
}

TEST(Npy, ErrorUnsupportedDtypes) {
  TempDir tmp;
  struct Case {
    std::string descr;
    std::string shown;
  };
  const std::vector<Case> cases = {{"'<c16'", "'<c16'"}, {"'|O'", "'|O'"}, {"'|u1'", "'|u1'"},
                                   {"'<f2'", "'<f2'"},   {"'<U8'", "'<U8'"}, {"'|b1'", "'|b1'"}};
  for (const Case& c : cases) {
    write_text(tmp / "d.npy",
               npy_image("{'descr': " + c.descr + ", 'fortran_order': False, 'shape': (2,), }",
                         std::string(64, '\0')));
    std::string msg = error_of(tmp / "d.npy");
    EXPECT_NE(msg.find(tmp / "d.npy" + ": unsupported dtype " + c.shown +
                       " (expected float32/float64 or int32/int64)"),
              std::string::npos)
        << msg;
  }
  // A structured dtype (a list of fields).
  write_text(tmp / "s.npy",
             npy_image("{'descr': [('x', '<f8'), ('y', '<i4')], 'fortran_order': False, "
                       "'shape': (2,), }",
                       std::string(64, '\0')));
  std::string msg = error_of(tmp / "s.npy");
  EXPECT_NE(msg.find("unsupported dtype"), std::string::npos) << msg;
}

TEST(Npy, ErrorMalformedHeader) {
  TempDir tmp;
  write_text(tmp / "m.npy", npy_image("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2,), }",
                                      pack<double>({1, 2}, false)));
  std::string msg = error_of(tmp / "m.npy");
  EXPECT_NE(msg.find("fortran_order"), std::string::npos) << msg;
  write_text(tmp / "n.npy", npy_image("{'descr': '<f8', 'fortran_order': False, }",
                                      pack<double>({1, 2}, false)));
  msg = error_of(tmp / "n.npy");
  EXPECT_NE(msg.find("no 'shape' key"), std::string::npos) << msg;
  write_text(tmp / "v.npy", std::string("\x93NUMPY\x07\x00\x10\x00", 10) + std::string(16, ' '));
  msg = error_of(tmp / "v.npy");
  EXPECT_NE(msg.find("unsupported .npy format version 7.0"), std::string::npos) << msg;
}

TEST(Npy, NumpyReadsWrittenFiles) {
  TempDir tmp;
  write_npy(tmp / "w.npy", {2, 3}, kSix);
  write_npy(tmp / "w1.npy", {3}, {1, 2, 3});
  const std::string script = "import numpy as np; a = np.load('" + (tmp / "w.npy") +
                             "'); b = np.load('" + (tmp / "w1.npy") +
                             "'); print(a.dtype, a.shape, a.tolist(), b.shape, b.tolist())";
  auto r = mlip::test::run_command(std::string(MLIP_TEST_PYTHON) + " -c \"" + script + "\"");
  if (r.exit_code == 127 || r.err.find("No module named") != std::string::npos) {
    GTEST_SKIP() << MLIP_TEST_PYTHON << " with numpy not available: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "float64 (2, 3) [[1.5, -2.25, 3.0], [4.125, -5.5, 6.0]] (3,) [1.0, 2.0, 3.0]\n");
}

TEST(Npy, AFifoIsRefusedWithoutBlocking) {
  TempDir tmp;
  ASSERT_EQ(mkfifo((tmp / "f.npy").c_str(), 0600), 0);
  // No writer ever opens the FIFO: reading its magic bytes would wait for ever.
  std::string msg = error_of(tmp / "f.npy");
  EXPECT_NE(msg.find(tmp / "f.npy" + ": is a FIFO (named pipe), expected a regular file"), std::string::npos) << msg;
}

TEST(Npy, RowsOfAFileChangedSinceItWasOpenedAreRefused) {
  TempDir tmp;
  write_npy(tmp / "a.npy", {2, 3}, {1, 2, 3, 4, 5, 6});
  const mlip::data::NpyFile file = mlip::data::open_npy(tmp / "a.npy");
  EXPECT_EQ(mlip::data::read_npy_rows(file, 1, 1), (std::vector<double>{4, 5, 6}));
  write_npy(tmp / "a.npy", {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});  // in place, a row more
  std::string msg;
  try {
    mlip::data::read_npy_rows(file, 1, 1);
    msg = "(no error)";
  } catch (const mlip::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(tmp / "a.npy" + ": changed since it was opened at start (size 176 -> 200 bytes"),
            std::string::npos)
      << msg;
}
