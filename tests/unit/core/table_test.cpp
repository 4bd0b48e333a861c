#include <gmock/gmock.h>

#include "neuromkl/core/errors.hpp"
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
