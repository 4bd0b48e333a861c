#pragma once
// Shared by the writers of this module (private): nlohmann/json stays out of public headers.
#include <cmath>

#include <nlohmann/json.hpp>

namespace neuromkl::exporting {

using Json = nlohmann::json;

/// JSON has no NaN or infinity: non-finite numbers are written as null.
inline Json Num(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace neuromkl::exporting
