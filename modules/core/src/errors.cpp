#include "neuromkl/core/errors.hpp"

namespace neuromkl {

namespace {
std::string Compose(const std::string& where, const std::string& message) {
  return where.empty() ? message : where + ": " + message;
}
}  // namespace

Error::Error(ErrorKind kind, std::string code, std::string where, const std::string& message)
    : std::runtime_error(Compose(where, message)),
      kind_(kind),
      code_(std::move(code)),
      where_(std::move(where)) {}

int Error::ExitCode() const {
  switch (kind_) {
    case ErrorKind::Config:
    case ErrorKind::InvalidParameter:
    case ErrorKind::Input:
    case ErrorKind::Geometry:
      return kExitBadInput;
    case ErrorKind::Numerical:
    case ErrorKind::Io:
      return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace neuromkl
