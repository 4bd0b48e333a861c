#include <gmock/gmock.h>

#include <filesystem>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/table.hpp"
#include "testing.hpp"

using namespace neuromkl;
using ::testing::HasSubstr;

TEST(Table, ReadsTsvAndCsvWithQuotes) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "p.tsv", "subject\tage\r\nsub-01\t30\r\n\nsub-02\tn/a\n");
  const auto t = ReadDelimitedTable(tmp / "p.tsv");
  EXPECT_EQ(t.header, (std::vector<std::string>{"subject", "age"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.lineNumbers[1], 4u);
  EXPECT_TRUE(IsMissingCell(t.rows[1][1]));
  neuromkl::testing::WriteFile(tmp / "p.csv", "id,name\n1,\"Smith, J\"\n");
  const auto c = ReadDelimitedTable(tmp / "p.csv");
  EXPECT_EQ(c.rows[0][1], "Smith, J");
}

TEST(Table, RaggedRowNamesTheLine) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "p.tsv", "a\tb\n1\t2\n3\n");
  EXPECT_THAT([&] { ReadDelimitedTable(tmp / "p.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("p.tsv:3"), HasSubstr("expected 2 cells"), HasSubstr("found 1"))));
}

TEST(Table, MissingColumnListsColumnsAndSuggests) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "p.tsv", "subject\tdiagnosis\nsub-01\tAD\n");
  const auto t = ReadDelimitedTable(tmp / "p.tsv");
  EXPECT_THAT([&] { t.Require("diagnosys", "target"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("subject, diagnosis"), HasSubstr("did you mean \"diagnosis\""))));
}

TEST(Table, EmptyAndMissingFilesAreErrors) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "empty.tsv", "\n\n");
  EXPECT_THAT([&] { ReadDelimitedTable(tmp / "empty.tsv"); }, ::testing::ThrowsMessage<InputError>(HasSubstr("empty")));
  EXPECT_THAT([&] { ReadDelimitedTable(tmp / "nope.tsv"); }, ::testing::ThrowsMessage<InputError>(HasSubstr("cannot open")));
}

// Two columns of one name: every lookup by name was ambiguous (two feature kernels of one name, or the first silently
// used).
TEST(Table, AColumnNameGivenTwiceIsAnErrorNamingBothColumns) {
  neuromkl::testing::TempDir tmp;
  neuromkl::testing::WriteFile(tmp / "p.tsv", "subject\tx\ty\tx\nsub-01\t1\t2\t3\n");
  EXPECT_THAT([&] { ReadDelimitedTable(tmp / "p.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("p.tsv:1"),
                                                                     HasSubstr("column \"x\" appears twice in the header (columns 2 and 4)"))));
}

// A folder given as the table read as an empty table; a quoted header in a TSV as a missing column that the list of
// found columns seemed to contain.
TEST(Table, AFolderOrAQuotedHeaderSayWhatWasFound) {
  neuromkl::testing::TempDir tmp;
  std::filesystem::create_directories(tmp / "folder.tsv");
  EXPECT_THAT([&] { ReadDelimitedTable(tmp / "folder.tsv"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("folder.tsv: expected a table file, but it is a directory")));
  neuromkl::testing::WriteFile(tmp / "q.tsv", "\"subject\"\t\"age\"\nsub-01\t3\n");
  const auto t = ReadDelimitedTable(tmp / "q.tsv");
  EXPECT_THAT([&] { t.Require("subject", "subject id column"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("the header has it in double quotes (\"subject\"), and in a tab-separated file")));
  std::filesystem::create_symlink("loop_b", tmp / "loop_a");
  std::filesystem::create_symlink("loop_a", tmp / "loop_b");
  std::filesystem::create_symlink("gone", tmp / "dangling");
  EXPECT_EQ(WhyNotAFile(tmp / "loop_a"), "it is a symbolic link loop");
  EXPECT_EQ(WhyNotAFile(tmp / "dangling"), "it is a broken symbolic link (to gone)");
  EXPECT_EQ(WhyNotAFile(tmp / "none"), "it does not exist");
  EXPECT_EQ(WhyNotAFile(tmp / "q.tsv"), "");
}

// A NUL byte (a damaged cell) ended the message where it stood.
TEST(Errors, NulBytesAreShownAndDoNotCutTheMessage) {
  const InputError e("table:DuplicateId", std::string("p.tsv:3\0", 8), std::string("id \"a\0b\" appears twice", 22));
  EXPECT_EQ(std::string(e.what()), "p.tsv:3\\0: id \"a\\0b\" appears twice");
  EXPECT_EQ(e.where(), "p.tsv:3\\0");
}

