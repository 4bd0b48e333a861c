#include "testing.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace neuromkl::testing {

namespace fs = std::filesystem;

std::string SharedData(const std::string& relative) { return std::string(NEUROMKL_SHARED_DATA) + "/" + relative; }
std::string TestData(const std::string& relative) { return std::string(NEUROMKL_SOURCE_DIR) + "/tests/data/" + relative; }
bool SharedDataPresent(const std::string& relative) { return fs::exists(SharedData(relative)); }
std::string SourcePath(const std::string& relative) { return std::string(NEUROMKL_SOURCE_DIR) + "/" + relative; }

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "neuromkl-test-XXXXXX").string();
  path_ = mkdtemp(pattern.data());
}
TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

CliResult RunShell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  CliResult r{-1, ""};
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int status = pclose(pipe);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

CliResult RunCli(const std::string& args) { return RunShell(std::string(NEUROMKL_CLI) + " " + args + " 2>&1"); }

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::vector<std::string>> ReadTsv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream c(line);
    std::string cell;
    while (std::getline(c, cell, '\t')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

std::vector<std::map<std::string, std::string>> ReadTsvByColumn(const std::string& path) {
  const auto rows = ReadTsv(path);
  std::vector<std::map<std::string, std::string>> out;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    auto& row = out.emplace_back();
    for (std::size_t c = 0; c < rows[0].size() && c < rows[r].size(); ++c) row[rows[0][c]] = rows[r][c];
  }
  return out;
}

FoldModelCheck ExpectFoldModelsGiveTheStudyDecisions(const std::string& results, const std::string& folder, const std::string& table,
                                                     const std::string& outPrefix, std::size_t subjects, double tolerance) {
  std::map<std::string, std::map<std::string, double>> expected;  // fold -> subject -> decision
  for (const auto& row : ReadTsvByColumn(results + "/predictions.tsv")) expected[row.at("fold")][row.at("subject")] = std::stod(row.at("decision"));
  EXPECT_FALSE(expected.empty()) << results;
  FoldModelCheck out;
  for (const auto& [fold, bySubject] : expected) {
    const std::string dir = outPrefix + fold;
    const auto r = RunCli("predict " + results + "/model/" + folder + "/folds/" + fold + " " + table + " --out " + dir + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    if (r.exitCode != 0) continue;
    out.outputs[fold] = dir;
    double scale = 0;
    for (const auto& [id, d] : bySubject) scale = std::max(scale, std::abs(d));
    const auto predicted = ReadTsvByColumn(dir + "/predictions.tsv");
    EXPECT_EQ(predicted.size(), subjects) << dir;
    for (const auto& row : predicted) {
      const auto want = bySubject.find(row.at("subject"));
      if (want == bySubject.end()) continue;  // a training subject of this fold's model
      EXPECT_NEAR(std::stod(row.at("decision")), want->second, tolerance * scale) << "fold " << fold << " subject " << row.at("subject");
      out.checked.push_back(row.at("subject"));
    }
  }
  return out;
}

std::string HeadlessChromium(const std::string& userDataDir) {
  return "chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
         "--disable-component-update --disable-sync --virtual-time-budget=5000 --user-data-dir=" + userDataDir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

::testing::AssertionResult MatrixNear(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b, double atol, double rtol) {
  if (a.rows() != b.rows() || a.cols() != b.cols())
    return ::testing::AssertionFailure() << "shapes differ: " << a.rows() << "x" << a.cols() << " vs " << b.rows() << "x" << b.cols();
  double worst = -1;
  Eigen::Index wi = 0, wj = 0;
  for (Eigen::Index j = 0; j < a.cols(); ++j)
    for (Eigen::Index i = 0; i < a.rows(); ++i) {
      const double excess = std::abs(a(i, j) - b(i, j)) - (atol + rtol * std::abs(b(i, j)));
      if (excess > worst) worst = excess, wi = i, wj = j;
    }
  if (worst <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "worst entry (" << wi << ", " << wj << "): " << a(wi, wj) << " vs " << b(wi, wj)
                                       << " (atol " << atol << ", rtol " << rtol << ")";
}

}  // namespace neuromkl::testing
