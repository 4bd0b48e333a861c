#include "owner_protocol.hpp"

#include <iterator>
#include <stdexcept>

namespace neuromkl::gram::detail {

std::string OpName(int op) {
  static const char* const names[] = {"",           "preprocessing", "open_fold",       "set_scales",  "close_fold",
                                      "facts",      "combine",       "quadratics",      "products",    "root_bounds",
                                      "test_blocks", "summed",       "view_products",   "subject_weights", "largest_self_similarity",
                                      "save_kernels", "test_products"};
  return op > 0 && op < static_cast<int>(std::size(names)) ? names[op] : std::to_string(op);
}

namespace {
OwnerRequest Ask(int op, std::int64_t fold) {
  OwnerRequest r;
  r.op = op;
  r.fold = fold;
  return r;
}

/// A length-prefixed index list.
template <typename Indices>
void AppendIndices(std::vector<std::int64_t>& out, const Indices& v) {
  out.push_back(static_cast<std::int64_t>(v.size()));
  for (Eigen::Index i = 0; i < static_cast<Eigen::Index>(v.size()); ++i) out.push_back(static_cast<std::int64_t>(v[static_cast<std::size_t>(i)]));
}
void AppendIndices(std::vector<std::int64_t>& out, const Eigen::VectorXi& v) {
  out.push_back(static_cast<std::int64_t>(v.size()));
  out.insert(out.end(), v.data(), v.data() + v.size());
}

/// Reads a length-prefixed index list written by AppendIndices at `at` (advanced past it).
Eigen::VectorXi ReadIndices(const std::vector<std::int64_t>& ints, std::size_t& at) {
  if (at >= ints.size()) throw std::logic_error("owner request: index list missing");
  const auto count = static_cast<std::size_t>(ints[at++]);
  if (at + count > ints.size()) throw std::logic_error("owner request: index list truncated");
  Eigen::VectorXi v(static_cast<Eigen::Index>(count));
  for (std::size_t i = 0; i < count; ++i) v[static_cast<Eigen::Index>(i)] = static_cast<int>(ints[at + i]);
  at += count;
  return v;
}

/// The kernel indices from position `at` to the end.
std::vector<Eigen::Index> Tail(const std::vector<std::int64_t>& ints, std::size_t at) {
  std::vector<Eigen::Index> which;
  for (std::size_t i = at; i < ints.size(); ++i) which.push_back(static_cast<Eigen::Index>(ints[i]));
  return which;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (const char c : text) {
    if (c == '\n') {
      lines.push_back(std::move(line));
      line.clear();
    } else {
      line += c;
    }
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}
}  // namespace

OwnerRequest Encode(int op, std::int64_t fold) { return Ask(op, fold); }

OwnerRequest Encode(const PreprocessingRequest& r) {
  OwnerRequest q = Ask(kPreprocessing, 0);
  q.ints = {r.centre ? 1 : 0, r.normalise ? 1 : 0};
  AppendIndices(q.ints, r.groups);
  q.ints.push_back(r.design.rows());
  q.ints.push_back(r.design.cols());
  AppendIndices(q.ints, r.fitRows);
  AppendIndices(q.ints, r.categoryOf);
  q.reals.assign(r.design.data(), r.design.data() + r.design.size());
  return q;
}

PreprocessingRequest DecodePreprocessing(const OwnerRequest& q) {
  PreprocessingRequest r;
  std::size_t at = 0;
  r.centre = q.ints.at(at++) != 0;
  r.normalise = q.ints.at(at++) != 0;
  for (const int g : ReadIndices(q.ints, at)) r.groups.push_back(g);
  const auto rows = static_cast<Eigen::Index>(q.ints.at(at++)), cols = static_cast<Eigen::Index>(q.ints.at(at++));
  for (const int v : ReadIndices(q.ints, at)) r.fitRows.push_back(v);
  for (const int v : ReadIndices(q.ints, at)) r.categoryOf.push_back(v);
  if (rows > 0) r.design = Eigen::Map<const Eigen::MatrixXd>(q.reals.data(), rows, cols);
  return r;
}

OwnerRequest Encode(int op, std::int64_t fold, const RowsRequest& r) {
  OwnerRequest q = Ask(op, fold);
  AppendIndices(q.ints, r.train);
  if (op != kLargestSelfSimilarity) AppendIndices(q.ints, r.test);
  return q;
}

RowsRequest DecodeRows(const OwnerRequest& q) {
  RowsRequest r;
  std::size_t at = 0;
  r.train = ReadIndices(q.ints, at);
  if (q.op != kLargestSelfSimilarity) r.test = ReadIndices(q.ints, at);
  return r;
}

OwnerRequest Encode(int op, std::int64_t fold, const KernelValuesRequest& r) {
  OwnerRequest q = Ask(op, fold);
  q.reals = r.values;
  return q;
}

KernelValuesRequest DecodeKernelValues(const OwnerRequest& q) { return {q.reals}; }

OwnerRequest Encode(int op, std::int64_t fold, const KernelsRequest& r) {
  OwnerRequest q = Ask(op, fold);
  q.ints.assign(r.which.begin(), r.which.end());
  return q;
}

KernelsRequest DecodeKernels(const OwnerRequest& q) { return {Tail(q.ints, 0)}; }

OwnerRequest Encode(std::int64_t fold, const QuadraticsRequest& r) {
  OwnerRequest q = Ask(kQuadratics, fold);
  q.ints = {r.perKernel ? 1 : 0, r.A.cols()};
  q.ints.insert(q.ints.end(), r.which.begin(), r.which.end());
  q.reals.assign(r.A.data(), r.A.data() + r.A.size());
  return q;
}

QuadraticsRequest DecodeQuadratics(const OwnerRequest& q) {
  QuadraticsRequest r;
  r.perKernel = q.ints.at(0) != 0;
  const auto cols = static_cast<Eigen::Index>(q.ints.at(1));
  r.A = Eigen::Map<const Eigen::MatrixXd>(q.reals.data(), static_cast<Eigen::Index>(q.reals.size()) / std::max<Eigen::Index>(1, cols), cols);
  r.which = Tail(q.ints, 2);
  return r;
}

OwnerRequest Encode(std::int64_t fold, const ProductsRequest& r) {
  OwnerRequest q = Ask(kProducts, fold);
  q.ints.assign(r.which.begin(), r.which.end());
  q.reals.assign(r.v.data(), r.v.data() + r.v.size());
  return q;
}

ProductsRequest DecodeProducts(const OwnerRequest& q) {
  return {Tail(q.ints, 0), Eigen::Map<const Eigen::VectorXd>(q.reals.data(), static_cast<Eigen::Index>(q.reals.size()))};
}

OwnerRequest Encode(std::int64_t fold, const TestProductsRequest& r) {
  OwnerRequest q = Ask(kTestProducts, fold);
  q.ints = {r.form, r.C.cols()};
  q.ints.insert(q.ints.end(), r.which.begin(), r.which.end());
  q.reals.assign(r.C.data(), r.C.data() + r.C.size());
  return q;
}

TestProductsRequest DecodeTestProducts(const OwnerRequest& q, Eigen::Index trainRows) {
  TestProductsRequest r;
  r.form = static_cast<int>(q.ints.at(0));
  r.C = Eigen::Map<const Eigen::MatrixXd>(q.reals.data(), trainRows, static_cast<Eigen::Index>(q.ints.at(1)));
  r.which = Tail(q.ints, 2);
  return r;
}

OwnerRequest Encode(std::int64_t fold, const ViewProductsRequest& r) {
  OwnerRequest q = Ask(kViewProducts, fold);
  q.ints = {r.A.cols()};
  q.ints.insert(q.ints.end(), r.which.begin(), r.which.end());
  q.reals = r.scales;
  for (Eigen::Index c = 0; c < r.A.cols(); ++c) q.reals.insert(q.reals.end(), r.A.col(c).data(), r.A.col(c).data() + r.A.rows());
  return q;
}

ViewProductsRequest DecodeViewProducts(const OwnerRequest& q, Eigen::Index trainRows) {
  ViewProductsRequest r;
  const auto cols = static_cast<Eigen::Index>(q.ints.at(0));
  r.which = Tail(q.ints, 1);
  r.scales.assign(q.reals.begin(), q.reals.begin() + static_cast<std::ptrdiff_t>(r.which.size()));
  r.A = Eigen::Map<const Eigen::MatrixXd>(q.reals.data() + r.which.size(), trainRows, cols);
  return r;
}

OwnerRequest Encode(const SubjectWeightsRequest& r) {
  OwnerRequest q = Ask(kSubjectWeights, 0);
  AppendIndices(q.ints, r.train);
  AppendIndices(q.ints, r.test);
  q.reals.assign(r.coef.data(), r.coef.data() + r.coef.size());
  q.reals.insert(q.reals.end(), r.beta.data(), r.beta.data() + r.beta.size());
  return q;
}

SubjectWeightsRequest DecodeSubjectWeights(const OwnerRequest& q) {
  SubjectWeightsRequest r;
  std::size_t at = 0;
  r.train = ReadIndices(q.ints, at);
  r.test = ReadIndices(q.ints, at);
  r.coef = Eigen::Map<const Eigen::VectorXd>(q.reals.data(), r.train.size());
  r.beta = Eigen::Map<const Eigen::VectorXd>(q.reals.data() + r.train.size(), static_cast<Eigen::Index>(q.reals.size()) - r.train.size());
  return r;
}

OwnerRequest Encode(const SaveRequest& r) {
  OwnerRequest q = Ask(kSaveKernels, 0);
  q.text = r.folder + "\n";
  for (const auto& f : r.files) q.text += f + "\n";
  return q;
}

SaveRequest DecodeSave(const OwnerRequest& q) {
  std::vector<std::string> lines = Lines(q.text);
  if (lines.empty()) throw std::logic_error("owner request: no folder to save the kernels in");
  SaveRequest r;
  r.folder = lines[0];
  r.files.assign(lines.begin() + 1, lines.end());
  return r;
}

std::vector<double> PackUpper(const Eigen::MatrixXd& K) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(K.cols() * (K.cols() + 1) / 2));
  for (Eigen::Index j = 0; j < K.cols(); ++j) out.insert(out.end(), K.col(j).data(), K.col(j).data() + j + 1);
  return out;
}

void UnpackUpper(const std::vector<double>& packed, Eigen::Index n, Eigen::MatrixXd& K) {
  K.resize(n, n);
  const double* p = packed.data();
  for (Eigen::Index j = 0; j < n; p += j + 1, ++j) {
    K.col(j).head(j + 1) = Eigen::Map<const Eigen::VectorXd>(p, j + 1);
    for (Eigen::Index i = 0; i < j; ++i) K(j, i) = K(i, j);
  }
}

}  // namespace neuromkl::gram::detail
