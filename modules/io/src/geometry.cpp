#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "neuromkl/io/volume.hpp"

namespace neuromkl::io {

std::array<double, 3> Geometry::IndexToLps(const std::array<double, 3>& index) const {
  std::array<double, 3> p = origin;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) p[r] += direction[r * 3 + c] * spacing[c] * index[c];
  return p;
}

std::array<double, 3> Geometry::LpsToIndex(const std::array<double, 3>& lps) const {
  // direction is orthonormal in NIfTI files (ITK enforces it), so its inverse is its transpose.
  std::array<double, 3> d{lps[0] - origin[0], lps[1] - origin[1], lps[2] - origin[2]};
  std::array<double, 3> idx{};
  for (int c = 0; c < 3; ++c) {
    double s = 0;
    for (int r = 0; r < 3; ++r) s += direction[r * 3 + c] * d[r];
    idx[c] = s / spacing[c];
  }
  return idx;
}

std::array<double, 16> Geometry::RasAffine() const {
  std::array<double, 16> a{};
  for (int r = 0; r < 3; ++r) {
    const double flip = r < 2 ? -1.0 : 1.0;  // LPS -> RAS
    for (int c = 0; c < 3; ++c) a[r * 4 + c] = flip * direction[r * 3 + c] * spacing[c];
    a[r * 4 + 3] = flip * origin[r];
  }
  a[15] = 1;
  return a;
}

namespace {
template <std::size_t N, typename T>
std::string Vec(const std::array<T, N>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < N; ++i) s += (i ? ", " : "") + fmt::format("{:g}", static_cast<double>(v[i]));
  return s + "]";
}
}  // namespace

std::string Geometry::DifferenceFrom(const Geometry& other, double tolerance) const {
  std::vector<std::string> diffs;
  if (dims != other.dims) diffs.push_back("dimensions " + Vec(dims) + " vs " + Vec(other.dims));
  bool spacingDiffers = false, originDiffers = false, directionDiffers = false;
  for (int i = 0; i < 3; ++i) {
    const double scale = std::max(spacing[i], 1e-12);
    if (std::abs(spacing[i] - other.spacing[i]) > tolerance * scale) spacingDiffers = true;
    if (std::abs(origin[i] - other.origin[i]) > tolerance * scale) originDiffers = true;
  }
  for (int i = 0; i < 9; ++i)
    if (std::abs(direction[i] - other.direction[i]) > tolerance) directionDiffers = true;
  if (spacingDiffers) diffs.push_back("spacing " + Vec(spacing) + " vs " + Vec(other.spacing) + " mm");
  if (originDiffers) diffs.push_back("origin (LPS) " + Vec(origin) + " vs " + Vec(other.origin) + " mm");
  if (directionDiffers) diffs.push_back("direction " + Vec(direction) + " vs " + Vec(other.direction));
  std::string out;
  for (std::size_t i = 0; i < diffs.size(); ++i) out += (i ? "; " : "") + diffs[i];
  return out;
}

std::string Geometry::Describe() const {
  return fmt::format("{}x{}x{}, {:g}x{:g}x{:g} mm", dims[0], dims[1], dims[2], spacing[0], spacing[1], spacing[2]);
}

}  // namespace neuromkl::io
