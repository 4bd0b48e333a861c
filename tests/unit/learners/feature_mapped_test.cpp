// A FeatureMatrix whose values are a file mapping (the kernel cache's features.npy) stands for the same matrix in
// memory: every row, product and fit is the in-memory one's, bit for bit (the same values read in the same order);
// keeping rows renumbers them without touching the file; keeping regions compacts a writable file in place (a valid
// .npy of the new shape) and copies a read-only one's columns into memory, leaving the file as it was.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/mapped_file.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/learners/feature_learners.hpp"
#include "neuromkl/learners/learner.hpp"

namespace nm = neuromkl;
using nm::gram::FeatureMatrix;
using nm::gram::FeatureStorage;
using nm::gram::FoldFeatures;

namespace {

/// n subjects over regions of 40, 25, 2500, 9 and 30 voxels, in `storage`, the label in a third of regions 0 and 2.
FeatureMatrix MakeMatrix(FeatureStorage storage, int n, unsigned seed, Eigen::VectorXd& label) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  FeatureMatrix x;
  x.regionStart = {0};
  for (const Eigen::Index s : {40, 25, 2500, 9, 30}) x.regionStart.push_back(x.regionStart.back() + s);
  x.Resize(storage, n, x.regionStart.back());
  label.resize(n);
  for (int i = 0; i < n; ++i) {
    label[i] = i % 2 ? 1.0 : -1.0;
    if (storage != FeatureStorage::Float32) x.rowScale[i] = 0.5 + 0.1 * (i % 5);
    auto* row = x.MutableRow(i);
    for (Eigen::Index j = 0; j < x.Voxels(); ++j) {
      const bool signal = (j < 13 || (j >= 65 && j < 65 + 833)) && i % 2 == 1;
      const float v = uniform(rng) + (signal ? 0.3f : 0.0f);
      if (storage == FeatureStorage::Float32) static_cast<float*>(row)[j] = v;
      else if (storage == FeatureStorage::UInt8) static_cast<std::uint8_t*>(row)[j] = static_cast<std::uint8_t>(v * 180);
      else static_cast<std::int16_t*>(row)[j] = static_cast<std::int16_t>(v * 9000 - 4000);
    }
  }
  return x;
}

std::size_t ValueBytes(const FeatureMatrix& x) { return static_cast<std::size_t>(x.Subjects() * x.Voxels()) * nm::gram::BytesPerValue(x.storage); }

/// x written to `path` as features.npy holds it; the offset of its values.
std::uint64_t WriteFile(const FeatureMatrix& x, const std::string& path) {
  nm::WriteNpyRows(path, x.ContiguousValues(), x.Subjects(), x.Voxels(), nm::gram::NpyTypeOf(x.storage));
  return nm::NpyRowsDataOffset(path, x.Subjects(), x.Voxels(), nm::gram::NpyTypeOf(x.storage));
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void ExpectSameRows(const FeatureMatrix& a, const FeatureMatrix& b) {
  ASSERT_EQ(a.Subjects(), b.Subjects());
  ASSERT_EQ(a.Voxels(), b.Voxels());
  EXPECT_EQ(a.regionStart, b.regionStart);
  for (Eigen::Index i = 0; i < a.Subjects(); ++i) EXPECT_EQ(a.RowSegment(i, 0, a.Voxels()), b.RowSegment(i, 0, b.Voxels())) << "row " << i;
}

class MappedFeatures : public ::testing::TestWithParam<FeatureStorage> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();  // "Test/storage"
    for (char& c : name)
      if (c == '/') c = '_';
    dir_ = std::filesystem::temp_directory_path() / ("neuromkl_mapped_" + std::to_string(getpid()) + "_" + name);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace

TEST_P(MappedFeatures, AMappedFileIsTheMatrixInMemory) {
  Eigen::VectorXd label;
  const FeatureMatrix memory = MakeMatrix(GetParam(), 40, 11, label);
  const std::uint64_t offset = WriteFile(memory, Path("features.npy"));
  EXPECT_EQ(offset % 64, 0u) << "the values start on a 64-byte boundary";
  FeatureMatrix mapped;
  mapped.MapRows(GetParam(), nm::MappedFile::OpenReadOnly(Path("features.npy"), true), offset, memory.Subjects(), memory.Voxels());
  mapped.regionStart = memory.regionStart;
  mapped.rowScale = memory.rowScale;
  ASSERT_TRUE(mapped.Mapped());
  EXPECT_EQ(mapped.Bytes(), memory.Bytes());
  EXPECT_EQ(std::memcmp(mapped.ContiguousValues(), memory.ContiguousValues(), ValueBytes(memory)), 0);
  ExpectSameRows(mapped, memory);
  EXPECT_NO_THROW(mapped.Check());
  EXPECT_THROW(mapped.MutableRow(0), std::logic_error);

  // The learners' products and a fit: the same values in the same order give the same doubles.
  std::vector<int> train, test;
  for (int i = 0; i < 40; ++i) (i % 4 == 3 ? test : train).push_back(i);
  const FoldFeatures a(mapped, train, test, true, true), b(memory, train, test, true, true);
  const Eigen::VectorXd alpha = Eigen::VectorXd::LinSpaced(a.TrainingRows(), -1.0, 2.0);
  const Eigen::VectorXd all = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(mapped.Regions()));
  EXPECT_EQ(a.Times(a.TrainingTransposeTimes(alpha), all, true), b.Times(b.TrainingTransposeTimes(alpha), all, true));
  nm::learners::Targets targets;
  targets.y.resize(static_cast<Eigen::Index>(train.size()));
  for (std::size_t k = 0; k < train.size(); ++k) targets.y[static_cast<Eigen::Index>(k)] = label[train[k]];
  const nm::learners::ParamMap params{{"c", 1.0}, {"mu", 0.5}};
  const nm::learners::Model ma = nm::learners::FitFeatures("enmkl_svm", params, a, targets), mb = nm::learners::FitFeatures("enmkl_svm", params, b, targets);
  EXPECT_EQ(ma.beta, mb.beta);
  EXPECT_EQ(nm::learners::FeatureDecision(ma, a), nm::learners::FeatureDecision(mb, b));

  // Too short a file, or values off their alignment, are refused before any read.
  FeatureMatrix bad;
  EXPECT_THROW(bad.MapRows(GetParam(), nm::MappedFile::OpenReadOnly(Path("features.npy"), false), offset, 41, memory.Voxels()), std::invalid_argument);
  if (GetParam() != FeatureStorage::UInt8) {
    EXPECT_THROW(bad.MapRows(GetParam(), nm::MappedFile::OpenReadOnly(Path("features.npy"), false), offset + 1, 2, 3), std::invalid_argument);
  }
}

TEST_P(MappedFeatures, KeepingRowsRenumbersThemAndLeavesTheFileAsItWas) {
  Eigen::VectorXd label;
  FeatureMatrix memory = MakeMatrix(GetParam(), 12, 3, label);
  const std::uint64_t offset = WriteFile(memory, Path("features.npy"));
  const std::string before = Bytes(Path("features.npy"));
  FeatureMatrix mapped;
  mapped.MapRows(GetParam(), nm::MappedFile::OpenReadOnly(Path("features.npy"), false), offset, memory.Subjects(), memory.Voxels());
  mapped.regionStart = memory.regionStart;
  mapped.rowScale = memory.rowScale;
  for (const std::vector<int>& rows : {std::vector<int>{9, 1, 4, 0, 11}, std::vector<int>{4, 2, 0}}) {  // twice: a renumbering of a renumbering
    memory.KeepRows(rows);
    mapped.KeepRows(rows);
    ExpectSameRows(mapped, memory);
    if (GetParam() != FeatureStorage::Float32) {
      EXPECT_EQ(mapped.rowScale, memory.rowScale);
    }
  }
  EXPECT_EQ(mapped.ContiguousValues(), nullptr) << "renumbered rows are no longer one block";
  EXPECT_THROW(mapped.KeepRows({3}), nm::InputError);
  EXPECT_EQ(Bytes(Path("features.npy")), before);

  // Keeping regions of a read-only mapping copies the kept columns into memory; the file is not touched.
  memory.KeepRegions({0, 2, 4});
  mapped.KeepRegions({0, 2, 4});
  EXPECT_FALSE(mapped.Mapped());
  ExpectSameRows(mapped, memory);
  EXPECT_EQ(Bytes(Path("features.npy")), before);
}

TEST_P(MappedFeatures, KeepingRegionsOfAWritableFileCompactsItInPlace) {
  Eigen::VectorXd label;
  FeatureMatrix memory = MakeMatrix(GetParam(), 9, 5, label);
  const std::string prefix = nm::NpyRowsPrefix(memory.Subjects(), memory.Voxels(), nm::gram::NpyTypeOf(GetParam()));
  std::shared_ptr<nm::MappedFile> file = nm::MappedFile::Create(Path("features.npy"), prefix.size() + ValueBytes(memory));
  std::memcpy(file->MutableData(), prefix.data(), prefix.size());
  FeatureMatrix mapped;
  mapped.MapRows(GetParam(), file, prefix.size(), memory.Subjects(), memory.Voxels());
  mapped.regionStart = memory.regionStart;
  mapped.rowScale = memory.rowScale;
  for (Eigen::Index i = 0; i < memory.Subjects(); ++i)  // written row by row, as the images are read
    std::memcpy(mapped.MutableRow(i), memory.WithRow(i, [](const auto* row, double) { return static_cast<const void*>(row); }),
                static_cast<std::size_t>(memory.Voxels()) * nm::gram::BytesPerValue(GetParam()));
  ExpectSameRows(mapped, memory);

  memory.KeepRegions({1, 2, 4});
  mapped.KeepRegions({1, 2, 4});
  ASSERT_TRUE(mapped.Mapped());
  ExpectSameRows(mapped, memory);
  file->Flush();
  EXPECT_EQ(std::filesystem::file_size(Path("features.npy")), prefix.size() + ValueBytes(memory));
  // The file is a .npy of the new shape holding the kept columns, as a reader (numpy, the cache) sees it.
  std::vector<unsigned char> read(ValueBytes(memory));
  nm::ReadNpyRowsInto(Path("features.npy"), read.data(), memory.Subjects(), memory.Voxels(), nm::gram::NpyTypeOf(GetParam()));
  EXPECT_EQ(std::memcmp(read.data(), memory.ContiguousValues(), read.size()), 0);
  EXPECT_EQ(nm::NpyRowsDataOffset(Path("features.npy"), memory.Subjects(), memory.Voxels(), nm::gram::NpyTypeOf(GetParam())), prefix.size());
}

INSTANTIATE_TEST_SUITE_P(Storages, MappedFeatures, ::testing::Values(FeatureStorage::Float32, FeatureStorage::UInt8, FeatureStorage::Int16),
                         [](const auto& info) { return std::string(nm::gram::ToString(info.param)); });

// A file created for writing reserves its blocks first; a size beyond the file system's limits is an IoError naming the
// file, and nothing is left behind.
TEST(MappedFile, CreateReservesTheFileOrSaysWhyNot) {
  const std::string path = (std::filesystem::temp_directory_path() / "neuromkl_mapped_create.bin").string();
  {
    auto file = nm::MappedFile::Create(path, 4096 + 17);
    ASSERT_TRUE(file->Writable());
    std::memset(file->MutableData(), 7, file->Size());
    file->Truncate(100);
    EXPECT_EQ(file->Size(), 100u);
    file->Flush();
  }
  EXPECT_EQ(Bytes(path), std::string(100, '\7'));
  const auto readOnly = nm::MappedFile::OpenReadOnly(path, false);
  EXPECT_FALSE(readOnly->Writable());
  EXPECT_THROW(readOnly->MutableData(), std::logic_error);
  std::filesystem::remove(path);
  try {
    nm::MappedFile::Create(path, std::uint64_t{1} << 62);
    ADD_FAILURE() << "expected an IoError";
  } catch (const nm::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(nm::MappedFile::OpenReadOnly(path, false), nm::IoError);
}
