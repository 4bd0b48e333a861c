#include "neuromkl/config/participants_sidecar.hpp"

#include <filesystem>

#include "json_reader.hpp"
#include "neuromkl/core/errors.hpp"

namespace neuromkl::config {

std::string ParticipantsSidecarPath(const std::string& table) {
  const std::filesystem::path sidecar = std::filesystem::path(table).replace_extension(".json");
  std::error_code ec;
  return std::filesystem::is_regular_file(sidecar, ec) ? sidecar.string() : std::string();
}

ColumnLevels ReadParticipantsLevels(const std::string& path) {
  // Per column {"Description", "Levels": {value: description}, ...}; columns without "Levels" are skipped.
  const Json j = ParseConfigJson(ReadConfigText(path, "participants.json sidecar"), path);
  if (!j.is_object()) throw ConfigError("config:Type", path, "/: expected an object with one entry per column, found " + Describe(j));
  ColumnLevels out;
  for (const auto& [column, spec] : j.items()) {
    if (!spec.is_object() || !spec.contains("Levels")) continue;
    const Json& levels = spec["Levels"];
    if (!levels.is_object())
      throw ConfigError("config:Type", path, "/" + column + "/Levels: expected an object {\"value\": \"description\"}, found " + Describe(levels));
    auto& columnLevels = out[column];
    for (const auto& [value, description] : levels.items())
      columnLevels.push_back({value, description.is_string() ? description.get<std::string>() : description.dump()});
  }
  return out;
}

}  // namespace neuromkl::config
