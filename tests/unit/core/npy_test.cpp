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

TEST(Npy, NotNpyIsAnError) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "x.npy", "garbage");
  EXPECT_THAT([&] { ReadNpy(tmp / "x.npy"); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("not a NumPy .npy file")));
}
