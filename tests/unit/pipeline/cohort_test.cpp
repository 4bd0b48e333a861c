#include <gmock/gmock.h>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "testing.hpp"

using namespace neuromkl;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

struct Fixture {
  neuromkl::testing::TempDir dir;
  config::StudyConfig Study(const std::string& table, const std::string& task = "classification", const std::string& extraTarget = "") {
    neuromkl::testing::WriteFile(dir / "participants.tsv", table);
    for (const char* img : {"a.nii", "b.nii", "c.nii", "d.nii", "e.nii"}) neuromkl::testing::WriteFile(dir / img, "x");
    return config::ParseStudyConfig(R"({"name": "t", "subjects": {"table": "participants.tsv"}, "target": {"column": "dx", "task": ")" + task + "\"" +
                                        extraTarget + R"(}, "learners": [{"name": "krr"}]})",
                                    dir.Path(), "study.json");
  }
};

TEST(Cohort, ExcludesSubjectsWithoutTargetAndCodesClasses) {
  Fixture f;
  const auto c = pipeline::LoadCohort(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tb.nii\tn/a\ns3\tc.nii\tCN\ns4\td.nii\t\ns5\te.nii\tAD\n"));
  EXPECT_EQ(c.ids.size(), 5u);
  EXPECT_EQ(c.labelledRows, (std::vector<int>{0, 2, 4}));
  ASSERT_EQ(c.excluded.size(), 2u);
  EXPECT_EQ(c.excluded[0].first, "s2");
  EXPECT_THAT(c.excluded[0].second, HasSubstr("no target"));
  EXPECT_EQ(c.positiveClass, "CN");  // default: the last class in sorted order
  EXPECT_EQ(c.y, Eigen::Vector3d(-1, 1, -1));
  EXPECT_EQ(c.images[0], f.dir / "a.nii");  // relative to the table's folder
}

TEST(Cohort, PositiveClassAndNumericClassOrder) {
  Fixture f;
  const auto c = pipeline::LoadCohort(f.Study("subject\timage\tdx\ns1\ta.nii\t10\ns2\tb.nii\t2\n"));
  EXPECT_EQ(c.positiveClass, "10");  // numeric order: 2 < 10
  const auto d = pipeline::LoadCohort(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tb.nii\tCN\n", "classification", R"(, "positive_class": "AD")"));
  EXPECT_EQ(d.y, Eigen::Vector2d(1, -1));
}

void ExpectInputError(const config::StudyConfig& s, const std::vector<std::string>& pieces) {
  try {
    pipeline::LoadCohort(s);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    for (const auto& p : pieces) EXPECT_THAT(e.what(), HasSubstr(p));
    EXPECT_EQ(e.ExitCode(), kExitBadInput);
  }
}

TEST(Cohort, BadTablesGiveClearErrors) {
  Fixture f;
  ExpectInputError(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns1\tb.nii\tCN\n"), {"participants.tsv:3", "\"s1\" appears twice", "lines 2 and 3"});
  ExpectInputError(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tmissing.nii\tCN\n"), {"1 of 2 image files are missing or not files", "s2:", "missing.nii (it does not exist)"});
  ExpectInputError(f.Study("subject\timage\tdiagnosis\ns1\ta.nii\tAD\n"), {"no column \"dx\"", "subject, image, diagnosis"});
  ExpectInputError(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tb.nii\tAD\n"), {"found one", "\"AD\": 2"});
  ExpectInputError(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tb.nii\tCN\ns3\tc.nii\tMCI\n"), {"found 3 classes", "binary"});
  ExpectInputError(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tb.nii\tCN\n", "classification", R"(, "positive_class": "ad")"),
                   {"positive_class is \"ad\"", "did you mean \"AD\""});
  ExpectInputError(f.Study("subject\timage\tdx\ns1\ta.nii\t1.5\ns2\tb.nii\thigh\n", "regression"), {"participants.tsv:3", "s2", "\"high\"", "not a finite number"});
  ExpectInputError(f.Study("subject\timage\tdx\ns1\ta.nii\t1.5\ns2\tb.nii\tn/a\n", "regression"), {"at least 2 subjects with a target", "found 1"});
  ExpectInputError(f.Study("subject\timage\tdx\n"), {"no subject rows"});
  ExpectInputError(f.Study("subject\timage\tdx\n\ta.nii\t1\n"), {"empty subject id"});
}

// In a BIDS dataset "sub-01" and "01" are one participant: they became two subjects sharing one image.
TEST(Cohort, IdsNamingOneBidsParticipantAreAnError) {
  neuromkl::testing::TempDir dir;
  neuromkl::testing::WriteFile(dir / "participants.tsv", "participant_id\tdx\nsub-01\tAD\n02\tCN\n01\tCN\n");
  const auto study = config::ParseStudyConfig(R"({"name": "t", "subjects": {"bids": {"root": ".", "entities": {"suffix": "T1w"}}},
    "target": {"column": "dx", "task": "classification"}, "learners": [{"name": "krr"}]})",
                                              dir.Path(), "study.json");
  ExpectInputError(study, {"participants.tsv:4", "subject ids \"sub-01\" (line 2) and \"01\" (line 4) name the same BIDS participant sub-01"});
}

// A table joined by id (a tabular feature table, a connectivity table) used one of two rows of one id, silently.
TEST(Cohort, RowsByIdRefusesAnIdGivenTwice) {
  neuromkl::testing::TempDir dir;
  neuromkl::testing::WriteFile(dir / "features.tsv", "subject\tx\ns1\t1\ns2\t2\n\ns1\t3\n");
  const DelimitedTable table = ReadDelimitedTable(dir / "features.tsv");
  EXPECT_THAT([&] { pipeline::RowsById(table, "subject", "/kernels/tabular/id_column"); },
              ::testing::ThrowsMessage<InputError>(AllOf(HasSubstr("features.tsv:5"),
                                                         HasSubstr("id \"s1\" (/kernels/tabular/id_column) appears twice (lines 2 and 5)"))));
  EXPECT_EQ(pipeline::RowsById(table, "#row", "rows").size(), 3u);
}

// The cohort code reads what the study file only names: the table decides the default id column, and
// participants.json beside it declares the target's levels (a malformed one is an error naming it).
TEST(Cohort, IdColumnAndParticipantsSidecarAreReadWithTheTable) {
  Fixture f;
  const std::string table = "participant_id\timage\tdx\nsub-01\ta.nii\tAD\nsub-02\tb.nii\tCN\n";
  auto c = pipeline::LoadCohort(f.Study(table));
  EXPECT_EQ(c.idColumn, "participant_id");
  EXPECT_TRUE(c.sidecar.empty());
  EXPECT_TRUE(c.classDescriptions.empty());
  neuromkl::testing::WriteFile(f.dir / "participants.json",
                               R"({"dx": {"Description": "diagnosis", "Levels": {"AD": "Alzheimer's disease", "CN": "control"}}, "age": {"Units": "y"}})");
  c = pipeline::LoadCohort(f.Study(table));
  EXPECT_EQ(c.sidecar, f.dir / "participants.json");
  ASSERT_EQ(c.classDescriptions.size(), 2u);
  EXPECT_EQ(c.classDescriptions.at("AD"), "Alzheimer's disease");
  // A table with "subject" instead of participant_id keeps working without id_column ...
  c = pipeline::LoadCohort(f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tb.nii\tCN\n"));
  EXPECT_EQ(c.idColumn, "subject");
  EXPECT_EQ(c.ids, (std::vector<std::string>{"s1", "s2"}));
  // ... but an id_column that is given is the id column.
  auto given = f.Study("subject\timage\tdx\ns1\ta.nii\tAD\ns2\tb.nii\tCN\n");
  given.subjects.idColumnGiven = true;
  ExpectInputError(given, {"no column \"participant_id\"", "/subjects/id_column"});
  // A malformed sidecar is an error naming it.
  neuromkl::testing::WriteFile(f.dir / "participants.json", R"({"dx": {"Levels": ["AD", "CN"]}})");
  try {
    pipeline::LoadCohort(f.Study(table));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("participants.json"));
    EXPECT_THAT(e.what(), HasSubstr("/dx/Levels: expected an object"));
  }
}

}  // namespace
