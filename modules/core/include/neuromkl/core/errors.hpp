#pragma once
// The error hierarchy. Every message says what was expected, what was found and where
// (file, subject id, JSON pointer). Solver non-convergence is NOT an error: it is a FitStatus.
#include <exception>
#include <stdexcept>
#include <string>

namespace neuromkl {

enum class ErrorKind { Config, InvalidParameter, Input, Geometry, Numerical, Io };

/// Process exit codes documented in the README.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;    ///< failure while running (numerical, writing outputs)
inline constexpr int kExitBadInput = 2;   ///< bad config or input data

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string code, std::string where, const std::string& message);
  ErrorKind kind() const { return kind_; }
  const std::string& code() const { return code_; }     ///< stable id, e.g. "config:UnknownKey"
  const std::string& where() const { return where_; }   ///< file, subject or JSON pointer
  int ExitCode() const;

 private:
  ErrorKind kind_;
  std::string code_;
  std::string where_;
};

#define NEUROMKL_ERROR_CLASS(Name, Kind)                                              \
  class Name : public Error {                                                         \
   public:                                                                            \
    Name(std::string code, std::string where, const std::string& message)             \
        : Error(ErrorKind::Kind, std::move(code), std::move(where), message) {}       \
  };
NEUROMKL_ERROR_CLASS(ConfigError, Config)
NEUROMKL_ERROR_CLASS(InvalidParameter, InvalidParameter)
NEUROMKL_ERROR_CLASS(InputError, Input)
NEUROMKL_ERROR_CLASS(GeometryMismatch, Geometry)
NEUROMKL_ERROR_CLASS(NumericalError, Numerical)
NEUROMKL_ERROR_CLASS(IoError, Io)
#undef NEUROMKL_ERROR_CLASS

/// A failure as text for another process ("kind \0 code \0 where \0 message"; kind -1 for a failure that is not an
/// Error), and back: ThrowSerialisedError throws the same error class with the same code, place and message, so a
/// failure on an MPI rank reaches the user as the one-process run reports it. A failure that is not an Error comes
/// back as std::runtime_error prefixed with `origin` (e.g. "rank 2").
std::string SerialiseError(std::exception_ptr failure);
[[noreturn]] void ThrowSerialisedError(const std::string& text, const std::string& origin);

}  // namespace neuromkl
