// The one exception type of the library. Every validation failure names the argument it is about
// and says what was expected, and is raised before any kernel runs or any byte is written.
#pragma once
#include <stdexcept>
#include <string>

namespace replayssm {

class Error : public std::runtime_error {
 public:
  Error(std::string argument, const std::string& message)
      : std::runtime_error(argument.empty() ? message : argument + ": " + message),
        argument_(std::move(argument)) {}
  // The argument (tensor or field) the error is about, e.g. "x" or "cache.cursor"; may be empty.
  const std::string& argument() const { return argument_; }

 private:
  std::string argument_;
};

}  // namespace replayssm
