#include "neuromkl/core/errors.hpp"

#include <algorithm>
#include <vector>

namespace neuromkl {

namespace {
/// A NUL byte (from a damaged file's cell or name) would end the message where what() is read as a C string, and it
/// separates the fields of a serialised error: shown as "\0".
std::string Visible(std::string text) {
  for (std::size_t at = text.find('\0'); at != std::string::npos; at = text.find('\0', at + 2)) text.replace(at, 1, "\\0");
  return text;
}
std::string Compose(const std::string& where, const std::string& message) {
  return where.empty() ? Visible(message) : Visible(where) + ": " + Visible(message);
}
}  // namespace

Error::Error(ErrorKind kind, std::string code, std::string where, const std::string& message)
    : std::runtime_error(Compose(where, message)),
      kind_(kind),
      code_(std::move(code)),
      where_(Visible(std::move(where))) {}

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

std::string SerialiseError(std::exception_ptr failure) {
  std::string out;
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string message = e.where().empty() ? what : what.substr(std::min(what.size(), e.where().size() + 2));
    out = std::to_string(static_cast<int>(e.kind()));
    out += '\0' + e.code() + '\0' + e.where() + '\0' + message;
  } catch (const std::exception& e) {
    out = "-1";
    out += std::string(1, '\0') + "" + '\0' + "" + '\0' + e.what();
  } catch (...) {
    out = "-1";
    out += std::string(1, '\0') + "" + '\0' + "" + '\0' + "unknown failure";
  }
  return out;
}

void ThrowSerialisedError(const std::string& text, const std::string& origin) {
  std::vector<std::string> parts(4);
  std::size_t k = 0;
  for (char c : text) {
    if (c == '\0' && k < 3) ++k;
    else parts[k] += c;
  }
  int kind = -1;
  try {
    kind = std::stoi(parts[0]);
  } catch (const std::exception&) {
    kind = -1;
  }
  switch (kind) {
    case static_cast<int>(ErrorKind::Config): throw ConfigError(parts[1], parts[2], parts[3]);
    case static_cast<int>(ErrorKind::InvalidParameter): throw InvalidParameter(parts[1], parts[2], parts[3]);
    case static_cast<int>(ErrorKind::Input): throw InputError(parts[1], parts[2], parts[3]);
    case static_cast<int>(ErrorKind::Geometry): throw GeometryMismatch(parts[1], parts[2], parts[3]);
    case static_cast<int>(ErrorKind::Numerical): throw NumericalError(parts[1], parts[2], parts[3]);
    case static_cast<int>(ErrorKind::Io): throw IoError(parts[1], parts[2], parts[3]);
    default: throw std::runtime_error(origin + ": " + parts[3]);
  }
}

}  // namespace neuromkl
