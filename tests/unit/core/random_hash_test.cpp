#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/random.hpp"

using namespace neuromkl;

// splitmix64's published reference outputs for seed 0 (Vigna's splitmix64.c): the generator is
// portable only if these hold bit for bit.
TEST(Rng, SplitMix64ReferenceOutputs) {
  Rng r(0);
  EXPECT_EQ(r.Next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(r.Next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(r.Next(), 0x06C45D188009454FULL);
}

TEST(Rng, UniformIsInUnitIntervalWithTheRightMoments) {
  Rng r(42);
  const int n = 200000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sq += u * u;
  }
  // Mean 1/2 (SE = sqrt(1/12 / n) = 6.5e-4) and variance 1/12 (SE ~ 2e-4): 5 SE.
  EXPECT_NEAR(sum / n, 0.5, 5 * 6.5e-4);
  EXPECT_NEAR(sq / n - (sum / n) * (sum / n), 1.0 / 12.0, 1e-3);
}

TEST(Rng, NormalHasTheRightMomentsAndTails) {
  Rng r(7);
  const int n = 200000;
  double sum = 0, sq = 0, fourth = 0;
  int beyond196 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = r.Normal();
    sum += z;
    sq += z * z;
    fourth += z * z * z * z;
    beyond196 += std::abs(z) > 1.959964;
  }
  // Mean 0 (SE 2.2e-3), variance 1 (SE 3.2e-3), kurtosis 3 (SE ~ 0.011), P(|z| > 1.96) = 0.05
  // (SE 4.9e-4): tolerances of 5 SE.
  EXPECT_NEAR(sum / n, 0.0, 0.011);
  EXPECT_NEAR(sq / n, 1.0, 0.016);
  EXPECT_NEAR(fourth / n, 3.0, 0.06);
  EXPECT_NEAR(static_cast<double>(beyond196) / n, 0.05, 0.0025);
}

TEST(Rng, SameSeedSameStreamAndShuffleIsAPermutation) {
  Rng a(99), b(99);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Normal(), b.Normal());
  std::vector<int> v(50);
  std::iota(v.begin(), v.end(), 0);
  Rng(5).Shuffle(v);
  EXPECT_EQ(std::set<int>(v.begin(), v.end()).size(), 50u);
  std::vector<int> sorted(50);
  std::iota(sorted.begin(), sorted.end(), 0);
  EXPECT_NE(v, sorted);
}

// XXH3-128 reference digests published with xxHash (the empty input, seed 0).
TEST(Hash, Xxh3_128ReferenceDigest) {
  Hasher empty;
  EXPECT_EQ(empty.Hex(), "99aa06d3014798d86001c324468d497f");
}

TEST(Hash, FileDigestEqualsStreamedBytesAndSeesOneByte) {
  const auto dir = std::filesystem::temp_directory_path() / "neuromkl_hash_test";
  std::filesystem::create_directories(dir);
  std::string bytes(3u << 20, '\0');  // larger than the 1 MiB read buffer
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(dir / "a.bin", std::ios::binary) << bytes;
  Hasher h;
  h.Update(bytes.data(), bytes.size());
  EXPECT_EQ(HashFile((dir / "a.bin").string()), h.Digest());
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(dir / "b.bin", std::ios::binary) << bytes;
  EXPECT_NE(HashFile((dir / "a.bin").string()), HashFile((dir / "b.bin").string()));
  std::filesystem::remove_all(dir);
}
