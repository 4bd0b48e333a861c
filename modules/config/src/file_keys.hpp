#pragma once
// Lookups in the key tables of neuromkl/config/file_keys.hpp.
#include <string>
#include <vector>

#include "json_reader.hpp"
#include "neuromkl/config/file_keys.hpp"

namespace neuromkl::config {

/// The keys of the object at a concrete JSON pointer ("/kernels/sources/2/atlas" matches the table's
/// "/kernels/sources/*/atlas"). std::logic_error when the table has no such object: a reader asked
/// for keys the table does not define.
const std::vector<std::string>& StudyKeysAt(const std::string& pointer);
const std::vector<std::string>& BatchKeysAt(const std::string& pointer);

/// std::logic_error naming the first key of `document` that `table` does not list at its place. Objects
/// at places the table does not list (learner params, BIDS entities, ...) are not looked into.
void RequireTableKeys(const std::vector<ObjectKeys>& table, const Json& document);

}  // namespace neuromkl::config
