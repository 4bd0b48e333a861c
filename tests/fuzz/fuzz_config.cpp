// libFuzzer target: the study-file parser (JSON -> validated StudyConfig).
#include <cstddef>
#include <cstdint>
#include <string>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)neuromkl::config::ParseStudyConfig(text, "/tmp", "fuzz.json");
  } catch (const neuromkl::Error&) {
  }
  return 0;
}
