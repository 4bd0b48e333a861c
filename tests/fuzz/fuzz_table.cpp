// libFuzzer target: the delimited-table reader (participants.tsv, CSV with quotes). The first byte
// chooses the file name (.tsv or .csv) so both delimiters are explored.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string path = neuromkl::fuzz::WriteInput(data + 1, size - 1, (data[0] & 1) ? ".csv" : ".tsv");
  try {
    const neuromkl::DelimitedTable t = neuromkl::ReadDelimitedTable(path);
    for (const auto& row : t.rows)
      if (row.size() != t.header.size()) __builtin_trap();  // the documented invariant
  } catch (const neuromkl::Error&) {
  }
  return 0;
}
