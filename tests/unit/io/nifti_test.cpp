#include <cmath>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using namespace neuromkl;
using neuromkl::testing::SourcePath;
using ::testing::HasSubstr;

namespace {

io::Volume Sample() {
  io::Volume v;
  v.geometry.dims = {7, 8, 9};  // non-cubic on purpose (nilearn's advice)
  v.geometry.spacing = {2, 3, 4};
  v.geometry.origin = {-10, 20, -30};
  v.data.resize(7 * 8 * 9);
  for (std::size_t i = 0; i < v.data.size(); ++i) v.data[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return v;
}

TEST(Nifti, WriteReadRoundTripKeepsValuesAndGeometry) {
  neuromkl::testing::TempDir tmp;
  for (const char* name : {"plain.nii", "compressed.nii.gz"}) {
    const io::Volume v = Sample();
    io::WriteVolume(tmp / name, v);
    const io::Volume r = io::ReadVolume(tmp / name);
    EXPECT_EQ(r.geometry.dims, v.geometry.dims);
    EXPECT_TRUE(r.geometry.DifferenceFrom(v.geometry).empty()) << r.geometry.DifferenceFrom(v.geometry);
    EXPECT_EQ(r.data, v.data);
  }
}

TEST(Nifti, VolumeCacheDecodesAnUnchangedFileOnceAndAChangedOneAgain) {
  neuromkl::testing::TempDir tmp;
  io::Volume v = Sample();
  io::WriteVolume(tmp / "a.nii.gz", v);
  {
    io::VolumeCacheScope cache(1 << 20);
    const std::size_t before = io::VolumeReadCount();
    EXPECT_EQ(io::ReadVolume(tmp / "a.nii.gz").data, v.data);
    EXPECT_EQ(io::ReadVolume(tmp / "a.nii.gz").data, v.data);
    EXPECT_EQ(io::VolumeReadCount() - before, 1u);
    v.data[5] = 42;  // a changed file (new size/mtime) is decoded again, never served stale
    io::WriteVolume(tmp / "a.nii.gz", v);
    std::filesystem::last_write_time(tmp / "a.nii.gz", std::filesystem::last_write_time(tmp / "a.nii.gz") + std::chrono::seconds(5));
    EXPECT_EQ(io::ReadVolume(tmp / "a.nii.gz").data[5], 42.0f);
    EXPECT_EQ(io::VolumeReadCount() - before, 2u);
  }
  {
    io::VolumeCacheScope tiny(16);  // over budget: decoded every time
    const std::size_t before = io::VolumeReadCount();
    io::ReadVolume(tmp / "a.nii.gz");
    io::ReadVolume(tmp / "a.nii.gz");
    EXPECT_EQ(io::VolumeReadCount() - before, 2u);
  }
  const std::size_t before = io::VolumeReadCount();  // no scope: no cache
  io::ReadVolume(tmp / "a.nii.gz");
  io::ReadVolume(tmp / "a.nii.gz");
  EXPECT_EQ(io::VolumeReadCount() - before, 2u);
}

TEST(Nifti, AalGeometryMatchesTheProvenanceAffine) {
  // PROVENANCE.md: x = -2i + 90, y = 2j - 126, z = 2k - 72 (RAS).
  const io::Geometry g = io::ReadGeometry(SourcePath("atlases/aal/ROI_MNI_V4.nii.gz"));
  EXPECT_EQ(g.dims, (std::array<std::int64_t, 3>{91, 109, 91}));
  const auto a = g.RasAffine();
  EXPECT_NEAR(a[0], -2, 1e-6);
  EXPECT_NEAR(a[3], 90, 1e-4);
  EXPECT_NEAR(a[5], 2, 1e-6);
  EXPECT_NEAR(a[7], -126, 1e-4);
  EXPECT_NEAR(a[10], 2, 1e-6);
  EXPECT_NEAR(a[11], -72, 1e-4);
}

TEST(Nifti, WagerGeometryMatchesTheProvenanceAffine) {
  const io::Geometry g = io::ReadGeometry(SourcePath("examples/wager2008_emoreg/nifti/sub-01_con_00810001.nii.gz"));
  EXPECT_EQ(g.dims, (std::array<std::int64_t, 3>{47, 56, 31}));
  const auto a = g.RasAffine();
  EXPECT_NEAR(a[0], 3.4375, 1e-6);
  EXPECT_NEAR(a[3], -79.0625, 1e-4);
  EXPECT_NEAR(a[7], -113.4375, 1e-4);
  EXPECT_NEAR(a[11], -49.5, 1e-4);
}

TEST(Nifti, WagerNansSurviveReading) {
  // sub-20 holds 4,916 NaN voxels (counted independently from the raw file).
  const io::Volume v = io::ReadVolume(SourcePath("examples/wager2008_emoreg/nifti/sub-20_con_00810020.nii.gz"));
  long nans = 0;
  for (float x : v.data) nans += std::isnan(x);
  EXPECT_EQ(nans, 4916);
}

TEST(Nifti, MissingFileIsAClearError) {
  EXPECT_THAT([] { io::ReadVolume("/nonexistent/sub-01.nii.gz"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("/nonexistent/sub-01.nii.gz"),
                                                                     HasSubstr("expected a NIfTI .nii or .nii.gz image file, but it does not exist"))));
  // A folder named like an image is said to be one (it was "not found").
  neuromkl::testing::TempDir tmp;
  std::filesystem::create_directories(tmp / "folder.nii");
  EXPECT_THAT([&] { io::ReadVolume(tmp / "folder.nii"); }, ::testing::ThrowsMessage<InputError>(HasSubstr("but it is a directory")));
}

TEST(Nifti, NonNiftiFileIsAClearError) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "notes.txt", "hello");
  EXPECT_THAT([&] { io::ReadVolume(tmp / "notes.txt"); }, ::testing::ThrowsMessage<InputError>(HasSubstr("not a NIfTI image")));
  neuromkl::testing::WriteFile(tmp / "fake.nii", std::string(400, 'x'));
  EXPECT_THAT([&] { io::ReadVolume(tmp / "fake.nii"); }, ::testing::ThrowsMessage<InputError>(HasSubstr("fake.nii")));
}

TEST(Nifti, TruncatedGzipIsAClearError) {
  neuromkl::testing::TempDir tmp;
  const std::string whole = neuromkl::testing::ReadFile(SourcePath("examples/wager2008_emoreg/nifti/sub-01_con_00810001.nii.gz"));
  neuromkl::testing::WriteFile(tmp / "cut.nii.gz", whole.substr(0, whole.size() / 2));
  EXPECT_THAT([&] { io::ReadVolume(tmp / "cut.nii.gz"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("cut.nii.gz"), HasSubstr("corrupt or truncated"))));
}

TEST(Nifti, FourDImageIsRejectedNotSilentlyCut) {
  neuromkl::testing::TempDir tmp;
  // A 2-volume 4-D image written by hand: header from a 3-D write, dims patched.
  io::Volume v = Sample();
  io::WriteVolume(tmp / "three.nii", v);
  std::string bytes = neuromkl::testing::ReadFile(tmp / "three.nii");
  std::int16_t dim[8];
  std::memcpy(dim, bytes.data() + 40, sizeof dim);
  dim[0] = 4;
  dim[4] = 2;
  std::memcpy(bytes.data() + 40, dim, sizeof dim);
  const std::size_t offset = static_cast<std::size_t>(*reinterpret_cast<const float*>(bytes.data() + 108));
  bytes += bytes.substr(offset);  // the second volume
  neuromkl::testing::WriteFile(tmp / "four.nii", bytes);
  EXPECT_THAT([&] { io::ReadVolume(tmp / "four.nii"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("expected a 3-D image"), HasSubstr("2 volumes"))));
}

TEST(Nifti, CountsDecodes) {
  const std::size_t before = io::VolumeReadCount();
  io::ReadVolume(SourcePath("examples/wager2008_emoreg/nifti/sub-01_con_00810001.nii.gz"));
  EXPECT_EQ(io::VolumeReadCount(), before + 1);
}

}  // namespace
