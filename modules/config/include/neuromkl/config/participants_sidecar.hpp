#pragma once
// participants.json (BIDS): the description of the subjects table's columns. The cohort code reads it
// when it reads the table (pipeline::LoadCohort); JSON is decoded here, where the JSON library lives.
#include <map>
#include <string>
#include <vector>

namespace neuromkl::config {

/// One level of a categorical column ("Levels": {"AD": "Alzheimer's disease"}).
struct ColumnLevel {
  std::string value, description;
};

/// Column -> its declared levels, for the columns that declare "Levels".
using ColumnLevels = std::map<std::string, std::vector<ColumnLevel>>;

/// The sidecar of a subjects table: the table's path with the extension ".json", when that file exists;
/// otherwise empty.
std::string ParticipantsSidecarPath(const std::string& table);

/// The "Levels" of every column of a participants.json. ConfigError naming the file for a file that is
/// not JSON, not an object, or whose "Levels" is not an object.
ColumnLevels ReadParticipantsLevels(const std::string& path);

}  // namespace neuromkl::config
