// Every image format the field stores (NIfTI-1 single/pair, NIfTI-2 single/pair, Analyze 7.5, gzip
// or not, any case) reads to the same voxels and geometry; bad files are clear errors. Fixtures are
// written byte by byte here, so the expected values are known exactly.
#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>

#include <gmock/gmock.h>

#include "image_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using namespace neuromkl;
using neuromkl::testing::FixtureFormat;
using neuromkl::testing::FixtureImage;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFixtureImage;
using ::testing::HasSubstr;

namespace {

FixtureImage FloatSample() {
  FixtureImage im;
  im.dims = {5, 6, 7};  // non-cubic on purpose
  im.spacing = {2, 3, 4};
  im.rasOrigin = {80, -120, -60};
  im.flipX = true;  // LAS, as SPM's MNI templates: exercises the quaternion with qfac = -1
  for (int i = 0; i < 5 * 6 * 7; ++i) im.stored.push_back(0.25 * i - 7.5);
  im.stored[17] = std::numeric_limits<double>::quiet_NaN();  // must survive (ITK's niftilib makes it 0)
  return im;
}

/// Bitwise equality, so NaN == NaN.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}

/// prefix + number + suffix, appended (GCC 12 raises a false -Wrestrict on "literal" + std::string).
std::string NumberedName(std::string prefix, int number, const std::string& suffix) {
  prefix += std::to_string(number);
  prefix += suffix;
  return prefix;
}

template <typename F>
std::string ErrorCodeOf(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.code() + " | " + e.where() + " | " + e.what();
  }
  return "no error";
}

}  // namespace

TEST(ImageFormats, TheSameImageInEveryFormatReadsToIdenticalVoxelsAndGeometry) {
  TempDir tmp;
  const FixtureImage im = FloatSample();
  const std::string reference = WriteFixtureImage(tmp / "ref.nii", FixtureFormat::Nifti1, im);  // geometry through ITK
  const io::Volume ref = io::ReadVolume(reference);
  EXPECT_TRUE(std::isnan(ref.data[17]));
  EXPECT_FLOAT_EQ(ref.data[18], 0.25f * 18 - 7.5f);
  // The LAS affine as written: x = -2 i + 80, y = 3 j - 120, z = 4 k - 60 (RAS).
  const auto a = ref.geometry.RasAffine();
  EXPECT_DOUBLE_EQ(a[0], -2);
  EXPECT_DOUBLE_EQ(a[3], 80);
  EXPECT_DOUBLE_EQ(a[5], 3);
  EXPECT_DOUBLE_EQ(a[7], -120);
  EXPECT_DOUBLE_EQ(a[10], 4);
  EXPECT_DOUBLE_EQ(a[11], -60);
  const std::vector<std::pair<std::string, FixtureFormat>> variants = {
      {"gz.nii.gz", FixtureFormat::Nifti1},      {"upper.NII.GZ", FixtureFormat::Nifti1}, {"pair.hdr", FixtureFormat::Nifti1Pair},
      {"pairgz.hdr.gz", FixtureFormat::Nifti1Pair}, {"PAIR.HDR", FixtureFormat::Nifti1Pair}, {"two.nii", FixtureFormat::Nifti2},
      {"two.nii.gz", FixtureFormat::Nifti2},     {"twopair.hdr", FixtureFormat::Nifti2Pair}};
  for (const auto& [name, format] : variants) {
    SCOPED_TRACE(name);
    const std::string path = WriteFixtureImage(tmp / name, format, im);
    const io::Volume v = io::ReadVolume(path);
    EXPECT_TRUE(SameBits(v.data, ref.data));
    EXPECT_EQ(v.geometry.dims, ref.geometry.dims);
    // Our header reader against ITK's on the same header values: exactly equal for axis-aligned grids.
    EXPECT_EQ(v.geometry.spacing, ref.geometry.spacing);
    EXPECT_EQ(v.geometry.origin, ref.geometry.origin);
    EXPECT_EQ(v.geometry.direction, ref.geometry.direction);
  }
  // A pair can be named by its .img half too.
  EXPECT_TRUE(SameBits(io::ReadVolume(tmp / "pair.img").data, ref.data));
  EXPECT_EQ(io::ReadImageFormat(tmp / "pair.img"), io::ImageFormat::Nifti1Pair);
  EXPECT_EQ(io::ReadImageFormat(tmp / "twopair.hdr"), io::ImageFormat::Nifti2Pair);
  EXPECT_EQ(io::ReadImageFormat(tmp / "two.nii"), io::ImageFormat::Nifti2);
}

TEST(ImageFormats, IntegerTypesScalingAndByteOrder) {
  TempDir tmp;
  FixtureImage im;
  im.dims = {4, 3, 2};
  for (int i = 0; i < 24; ++i) im.stored.push_back(i * 100 - 1000);
  im.datatype = 4;  // int16, SPM style: scl_slope 0.0125, scl_inter 2
  im.slope = 0.0125;
  im.inter = 2;
  for (bool big : {false, true})
    for (const auto& [name, format] : {std::pair{"single.nii", FixtureFormat::Nifti1}, std::pair{"pair.hdr", FixtureFormat::Nifti1Pair},
                                       std::pair{"pairgz.hdr.gz", FixtureFormat::Nifti1Pair}}) {
      SCOPED_TRACE(std::string(name) + (big ? " big-endian" : " little-endian"));
      im.bigEndian = big;
      const io::Volume v = io::ReadVolume(WriteFixtureImage(tmp / ((big ? "be_" : "le_") + std::string(name)), format, im));
      for (int i = 0; i < 24; ++i)  // slope and intercept in double, then rounded once to float32
        EXPECT_EQ(v.data[static_cast<std::size_t>(i)], static_cast<float>((i * 100 - 1000) * static_cast<double>(0.0125f) + 2.0)) << i;
    }
  // Every other datatype, NIfTI-2 (double-precision scaling fields).
  for (int type : {2, 256, 512, 8, 768, 64, 1024, 1280}) {
    FixtureImage t;
    t.dims = {3, 2, 2};
    for (int i = 0; i < 12; ++i) t.stored.push_back(i * 7 + 1);
    t.datatype = type;
    t.slope = 0.5;
    const io::Volume v = io::ReadVolume(WriteFixtureImage(tmp / NumberedName("t", type, ".nii"), FixtureFormat::Nifti2, t));
    for (int i = 0; i < 12; ++i) EXPECT_EQ(v.data[static_cast<std::size_t>(i)], (i * 7 + 1) * 0.5f) << "datatype " << type;
  }
}

// The stored form from the header alone: each integer datatype's range and its scaling (an unscaled image: slope 1,
// inter 0; scl_slope 1 with scl_inter 0 is unscaled too), floating-point datatypes not integer.
TEST(ImageFormats, StoredFormGivesTheDatatypeRangeAndScaling) {
  TempDir tmp;
  struct Case {
    int datatype;
    double slope, inter;
    bool integer;
    std::int64_t lowest, highest;
    double expectedSlope, expectedInter;
    const char* name;
  };
  for (const Case& c : {Case{2, 0.5, 0, true, 0, 255, 0.5, 0, "uint8"}, Case{256, 0, 0, true, -128, 127, 1, 0, "int8"},
                        Case{4, 0.0125, 2, true, -32768, 32767, 0.0125, 2, "int16"}, Case{512, 1, 0, true, 0, 65535, 1, 0, "uint16"},
                        Case{8, 2, 0, true, -2147483648LL, 2147483647LL, 2, 0, "int32"}, Case{16, 0.5, 0, false, 0, 0, 0.5, 0, "float32"},
                        Case{64, 0, 0, false, 0, 0, 1, 0, "float64"}, Case{1024, 0, 0, false, 0, 0, 1, 0, "int64"}}) {
    FixtureImage im;
    im.dims = {2, 2, 1};
    im.stored = {1, 2, 3, 4};
    im.datatype = c.datatype;
    im.slope = c.slope;
    im.inter = c.inter;
    const io::StoredForm f = io::ReadStoredForm(WriteFixtureImage(tmp / (std::string(c.name) + ".nii.gz"), FixtureFormat::Nifti2, im));
    EXPECT_EQ(f.datatype, c.name);
    EXPECT_EQ(f.integer, c.integer) << c.name;
    EXPECT_EQ(f.lowest, c.lowest) << c.name;
    EXPECT_EQ(f.highest, c.highest) << c.name;
    EXPECT_EQ(f.slope, c.expectedSlope) << c.name;
    EXPECT_EQ(f.inter, c.expectedInter) << c.name;
  }
  EXPECT_THROW(io::ReadStoredForm(tmp / "none.nii"), InputError);
}

TEST(ImageFormats, AnalyzeFollowsSpmsFlippedConvention) {
  TempDir tmp;
  FixtureImage im;
  im.dims = {4, 5, 6};
  im.spacing = {2, 2, 3};
  im.datatype = 4;
  im.slope = 0.5;  // SPM's scale factor in funused1
  for (int i = 0; i < 120; ++i) im.stored.push_back(i);
  im.analyzeOriginator = {3, 2, 4};  // 1-based voxel at world (0, 0, 0)
  const std::string path = WriteFixtureImage(tmp / "spm.hdr", FixtureFormat::Analyze, im);
  EXPECT_EQ(io::ReadImageFormat(path), io::ImageFormat::Analyze75);
  const io::Volume v = io::ReadVolume(path);
  EXPECT_EQ(v.data[7], 3.5f);
  // SPM: mat = diag([-1 1 1 1]) * [vox, -vox .* origin], for 1-based indices: x = -2 (i1 - 3) = -2 i0 + 4.
  auto a = v.geometry.RasAffine();
  EXPECT_DOUBLE_EQ(a[0], -2);
  EXPECT_DOUBLE_EQ(a[3], 4);
  EXPECT_DOUBLE_EQ(a[5], 2);
  EXPECT_DOUBLE_EQ(a[7], -2);  // y = 2 (j1 - 2) = 2 j0 - 2
  EXPECT_DOUBLE_EQ(a[10], 3);
  EXPECT_DOUBLE_EQ(a[11], -9);  // z = 3 (k1 - 4) = 3 k0 - 9
  // No originator: the centre of the grid, (dim + 1) / 2 in 1-based voxels.
  im.analyzeOriginator = {0, 0, 0};
  a = io::ReadGeometry(WriteFixtureImage(tmp / "centre.hdr", FixtureFormat::Analyze, im)).RasAffine();
  EXPECT_DOUBLE_EQ(a[3], -2 * (1 - 2.5));  // x of voxel 0 = -vox (1 - origin)
  EXPECT_DOUBLE_EQ(a[7], 2 * (1 - 3.0));
  // pixdim[1] < 0: FSL's marker for an unflipped (neurological) file.
  im.negativeAnalyzeX = true;
  a = io::ReadGeometry(WriteFixtureImage(tmp / "fsl.hdr", FixtureFormat::Analyze, im)).RasAffine();
  EXPECT_DOUBLE_EQ(a[0], 2);
  EXPECT_THAT(io::AnalyzeConventionNote(), HasSubstr("SPM"));
}

TEST(ImageFormats, FourDImagesReadEveryVolumeButAreRefusedAsSubjects) {
  TempDir tmp;
  FixtureImage im;
  im.dims = {2, 2, 2};
  im.volumes = 3;
  for (int i = 0; i < 24; ++i) im.stored.push_back(i);
  for (auto format : {FixtureFormat::Nifti1, FixtureFormat::Nifti2}) {
    const std::string path = WriteFixtureImage(tmp / (format == FixtureFormat::Nifti1 ? "p1.nii.gz" : "p2.nii"), format, im);
    const io::Volume4D v = io::ReadVolume4D(path);
    EXPECT_EQ(v.volumes, 3);
    EXPECT_EQ(v.geometry.VoxelCount(), 8);
    ASSERT_EQ(v.data.size(), 24u);
    EXPECT_EQ(v.data[23], 23.0f);
    EXPECT_THAT(ErrorCodeOf([&] { io::ReadVolume(path); }), HasSubstr("io:Not3D"));
  }
}

TEST(ImageFormats, BadFilesAreClearErrorsNamingTheFile) {
  TempDir tmp;
  FixtureImage im;
  im.dims = {4, 4, 4};
  im.stored.assign(64, 1.0);
  // A pair without its .img.
  WriteFixtureImage(tmp / "lonely.hdr", FixtureFormat::Nifti1Pair, im);
  std::filesystem::remove(tmp / "lonely.img");
  auto e = ErrorCodeOf([&] { io::ReadVolume(tmp / "lonely.hdr"); });
  EXPECT_THAT(e, HasSubstr("io:MissingPairFile"));
  EXPECT_THAT(e, HasSubstr("lonely.img"));
  // An .img shorter than the header announces: refused before allocating, with both sizes.
  WriteFixtureImage(tmp / "short.hdr", FixtureFormat::Nifti1Pair, im);
  auto bytes = neuromkl::testing::ReadBytes(tmp / "short.img");
  bytes.resize(100);
  neuromkl::testing::WriteBytes(tmp / "short.img", bytes);
  e = ErrorCodeOf([&] { io::ReadVolume(tmp / "short.hdr"); });
  EXPECT_THAT(e, HasSubstr("io:Truncated"));
  EXPECT_THAT(e, HasSubstr("256 bytes"));
  EXPECT_THAT(e, HasSubstr("only 100 bytes"));
  // A header announcing 30000^3 voxels in a tiny file: an error, not a 100 TB allocation.
  FixtureImage huge = im;
  huge.dims = {30000, 30000, 30000};
  huge.stored.assign(8, 1.0);
  EXPECT_THAT(ErrorCodeOf([&] { io::ReadVolume(WriteFixtureImage(tmp / "huge.nii.gz", FixtureFormat::Nifti1, huge)); }),
              HasSubstr("io:Truncated"));
  // Analyze with a datatype it cannot hold (128 = RGB).
  FixtureImage rgb = im;
  rgb.datatype = 128;
  e = ErrorCodeOf([&] { io::ReadVolume(WriteFixtureImage(tmp / "rgb.hdr", FixtureFormat::Analyze, rgb)); });
  EXPECT_THAT(e, HasSubstr("io:UnsupportedType"));
  EXPECT_THAT(e, HasSubstr("Analyze 7.5 header: unsupported datatype 128"));
  // vox_offset inside the header of a single file (real files with 0 exist), or NaN: never a shifted read.
  for (double offset : {0.0, 348.0, std::numeric_limits<double>::quiet_NaN()}) {
    FixtureImage bad = im;
    bad.voxOffset = offset;
    e = ErrorCodeOf([&] { io::ReadVolume(WriteFixtureImage(tmp / "offset.nii", FixtureFormat::Nifti1, bad)); });
    EXPECT_THAT(e, HasSubstr("io:BadVoxOffset")) << offset;
    EXPECT_THAT(e, HasSubstr(">= 352")) << offset;
  }
  // A bad magic is reported as such (not as "not NIfTI" or a later grid mismatch).
  FixtureImage magic = im;
  magic.magicOverride = "n+3";
  e = ErrorCodeOf([&] { io::ReadVolume(WriteFixtureImage(tmp / "magic.nii", FixtureFormat::Nifti1, magic)); });
  EXPECT_THAT(e, HasSubstr("io:BadMagic"));
  EXPECT_THAT(e, HasSubstr("found \"n+3\\0\""));
  magic.magicOverride = std::string("n+1\0", 4);  // single-file magic in a pair header
  EXPECT_THAT(ErrorCodeOf([&] { io::ReadVolume(WriteFixtureImage(tmp / "wrongpair.hdr", FixtureFormat::Nifti1Pair, magic)); }),
              HasSubstr("io:BadMagic"));
  magic.magicOverride = "nXX";
  EXPECT_THAT(ErrorCodeOf([&] { io::ReadVolume(WriteFixtureImage(tmp / "magic2.nii", FixtureFormat::Nifti2, magic)); }),
              HasSubstr("bad NIfTI-2 magic"));
  // Not an image name at all.
  neuromkl::testing::WriteFile(tmp / "notes.txt", "hello");
  EXPECT_THAT(ErrorCodeOf([&] { io::ReadVolume(tmp / "notes.txt"); }), HasSubstr("io:NotNifti"));
}

TEST(ImageFormats, VolumeCacheOfAPairFollowsItsImgFile) {
  // The voxels of a pair live in the .img: a new .img (same .hdr) is decoded again, never served stale.
  TempDir tmp;
  FixtureImage im;
  im.dims = {2, 2, 2};
  im.stored.assign(8, 1.0);
  const std::string hdr = WriteFixtureImage(tmp / "p.hdr", FixtureFormat::Nifti1Pair, im);
  io::VolumeCacheScope cache(1 << 20);
  EXPECT_EQ(io::ReadVolume(hdr).data[3], 1.0f);
  im.stored[3] = 5;
  WriteFixtureImage(tmp / "q.hdr", FixtureFormat::Nifti1Pair, im);  // only p.img changes; p.hdr stays as it was
  std::filesystem::copy_file(tmp / "q.img", tmp / "p.img", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::last_write_time(tmp / "p.img", std::filesystem::last_write_time(tmp / "p.img") + std::chrono::seconds(5));
  EXPECT_EQ(io::ReadVolume(hdr).data[3], 5.0f);
  EXPECT_EQ(io::ImageFilePaths(hdr), (std::vector<std::string>{hdr, tmp / "p.img"}));
}
