#include <cstdint>
#include <cstring>
#include <vector>

#include <gmock/gmock.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/npy.hpp"
#include "testing.hpp"

using namespace neuromkl;

TEST(Npy, RoundTripIsExactAndRowMajor) {
  neuromkl::testing::TempDir tmp;
  Eigen::MatrixXd m(2, 3);
  m << 1, 2, 3, 4, 5, 6.25;
  WriteNpy(tmp / "m.npy", m);
  EXPECT_EQ(ReadNpy(tmp / "m.npy"), m);
  // numpy's layout: after the header, row-major float64: 1, 2, 3, 4, ...
  const std::string bytes = neuromkl::testing::ReadFile(tmp / "m.npy");
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ((bytes.size() - 6 * 8) % 64, 0u);  // header padded to 64 bytes
  double second;
  std::memcpy(&second, bytes.data() + bytes.size() - 6 * 8 + 8, 8);
  EXPECT_EQ(second, 2.0);
}

// The compact kernel store's files (float32, column-major as Eigen holds them): exact both ways, read by the
// float64 reader too (numpy's layout), and a float64 file is refused by the float32 reader.
TEST(Npy, Float32RoundTripIsExactInEitherOrder) {
  neuromkl::testing::TempDir tmp;
  Eigen::MatrixXf m(2, 3);
  m << 1.5f, 2, 3, 4, 5, 6.25f;
  WriteNpy(tmp / "f.npy", m);
  EXPECT_EQ(ReadNpyFloat32(tmp / "f.npy"), m);
  EXPECT_EQ(ReadNpy(tmp / "f.npy"), m.cast<double>());
  EXPECT_THAT(neuromkl::testing::ReadFile(tmp / "f.npy").substr(0, 64), ::testing::HasSubstr("'fortran_order': True"));
  // A C-order float32 file (as numpy.save writes by default), by hand: rows 1 2 3 / 4 5 6.25.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header;
  for (float v : {1.5f, 2.0f, 3.0f, 4.0f, 5.0f, 6.25f}) bytes.append(reinterpret_cast<const char*>(&v), 4);
  neuromkl::testing::WriteFile(tmp / "c.npy", bytes);
  EXPECT_EQ(ReadNpyFloat32(tmp / "c.npy"), m);
  WriteNpy(tmp / "d.npy", Eigen::MatrixXd(m.cast<double>()));
  EXPECT_THAT([&] { ReadNpyFloat32(tmp / "d.npy"); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("expected dtype float32, found f64")));
  // Truncated data are refused before anything is read into the matrix.
  neuromkl::testing::WriteFile(tmp / "t.npy", bytes.substr(0, bytes.size() - 4));
  EXPECT_THAT([&] { ReadNpyFloat32(tmp / "t.npy"); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("truncated")));
}

TEST(Npy, NotNpyIsAnError) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "x.npy", "garbage");
  EXPECT_THAT([&] { ReadNpy(tmp / "x.npy"); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("not a NumPy .npy file")));
}

/// A .npy file with the given header text and `dataBytes` zero bytes of data.
std::string NpyWithHeader(const std::string& dict, std::size_t dataBytes) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY\x01";
  bytes += '\0';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + std::string(dataBytes, '\0');
}

// The announced size is compared with the file's length before anything is allocated: a shape of 1e8 x 1e8
// would otherwise fail allocating (std::bad_alloc, "unexpected failure"), and a smaller lie would be allocated and
// zero-filled before the short read is noticed. An InputError naming the file and both sizes.
TEST(Npy, HeaderSizesAreCheckedAgainstTheFileBeforeAllocating) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "huge.npy", NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (100000000, 100000000), }", 64));
  EXPECT_THAT([&] { ReadNpy(tmp / "huge.npy"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(::testing::HasSubstr("huge.npy"), ::testing::HasSubstr("dimension of 100000000"),
                                                                     ::testing::HasSubstr("only 64 data bytes"))));
  neuromkl::testing::WriteFile(tmp / "short.npy", NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 3), }", 64));
  EXPECT_THAT([&] { ReadNpy(tmp / "short.npy"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(::testing::HasSubstr("3 x 3 values of 8 bytes (72 bytes)"),
                                                                     ::testing::HasSubstr("only 64 data bytes"))));
  // A dimension beyond 64 bits (std::stoll threw std::out_of_range: "unexpected failure").
  neuromkl::testing::WriteFile(tmp / "overflow.npy",
                               NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999, 1), }", 8));
  EXPECT_THAT([&] { ReadNpy(tmp / "overflow.npy"); },
              ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("dimension of 99999999999999999999999 but the file holds only 8")));
  // A header length beyond the file (version 2: 4-byte length of ~4 GB).
  std::string v2 = "\x93NUMPY\x02";
  v2 += std::string("\0\xff\xff\xff\xf0", 5);
  neuromkl::testing::WriteFile(tmp / "hdr.npy", v2 + "{}");
  EXPECT_THAT([&] { ReadNpy(tmp / "hdr.npy"); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("header length")));
  // The exact size still reads.
  neuromkl::testing::WriteFile(tmp / "ok.npy", NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4), }", 64));
  EXPECT_EQ(ReadNpy(tmp / "ok.npy"), Eigen::MatrixXd::Zero(2, 4));
}

// A feature matrix's rows (uint8 / int16 codes, float32 values) written and read in place: exact, numpy's C order
// (value (i, j) at byte offset (i cols + j) x width after the header), and a file of another dtype, order or shape is
// refused with the file's name.
TEST(Npy, RowsOfEveryFeatureTypeRoundTripInPlace) {
  neuromkl::testing::TempDir tmp;
  const std::vector<std::uint8_t> codes8 = {0, 1, 255, 7, 128, 3};
  const std::vector<std::int16_t> codes16 = {-32768, 32767, 0, -1, 12, 300};
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f, 0.0f, 6.5f};
  WriteNpyRows(tmp / "u1.npy", codes8.data(), 2, 3, NpyType::UInt8);
  WriteNpyRows(tmp / "i2.npy", codes16.data(), 2, 3, NpyType::Int16);
  WriteNpyRows(tmp / "f4.npy", values.data(), 2, 3, NpyType::Float32);
  std::vector<std::uint8_t> back8(6);
  std::vector<std::int16_t> back16(6);
  std::vector<float> backF(6);
  ReadNpyRowsInto(tmp / "u1.npy", back8.data(), 2, 3, NpyType::UInt8);
  ReadNpyRowsInto(tmp / "i2.npy", back16.data(), 2, 3, NpyType::Int16);
  ReadNpyRowsInto(tmp / "f4.npy", backF.data(), 2, 3, NpyType::Float32);
  EXPECT_EQ(back8, codes8);
  EXPECT_EQ(back16, codes16);
  EXPECT_EQ(backF, values);
  const std::string bytes = neuromkl::testing::ReadFile(tmp / "i2.npy");
  EXPECT_THAT(bytes.substr(0, 128), ::testing::HasSubstr("'descr': '<i2', 'fortran_order': False, 'shape': (2, 3)"));
  EXPECT_EQ((bytes.size() - 6 * 2) % 64, 0u);
  std::int16_t second;
  std::memcpy(&second, bytes.data() + bytes.size() - 6 * 2 + 2, 2);  // row 0, column 1
  EXPECT_EQ(second, 32767);
  EXPECT_EQ(ReadNpy(tmp / "f4.npy")(1, 2), 6.5);  // the float32 rows read by the general reader too
  auto refused = [&](const std::string& file, void* data, std::int64_t rows, std::int64_t cols, NpyType type, const std::string& says) {
    try {
      ReadNpyRowsInto(tmp / file, data, rows, cols, type);
      ADD_FAILURE() << file << " was read";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(says)) << file;
      EXPECT_THAT(e.what(), ::testing::HasSubstr(file)) << file;
    }
  };
  refused("u1.npy", back16.data(), 2, 3, NpyType::Int16, "expected a C-order array of dtype <i2, found u1");
  refused("i2.npy", back16.data(), 3, 2, NpyType::Int16, "expected 3 x 2 values, found 2 x 3");
  Eigen::MatrixXf columnMajor(2, 3);
  columnMajor << 1, 2, 3, 4, 5, 6;
  WriteNpy(tmp / "fortran.npy", columnMajor);
  refused("fortran.npy", backF.data(), 2, 3, NpyType::Float32, "in Fortran order");
  const std::string whole = neuromkl::testing::ReadFile(tmp / "f4.npy");
  neuromkl::testing::WriteFile(tmp / "short.npy", whole.substr(0, whole.size() - 4));
  refused("short.npy", backF.data(), 2, 3, NpyType::Float32, "truncated");
}
