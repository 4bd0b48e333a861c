#pragma once
// The report's style sheet and script: modules/export/resources/report.css and report.js, embedded at build
// time (cmake/EmbedResource.cmake), so report.html stays one self-contained file.
#include <string_view>

namespace neuromkl::exporting::resources {

std::string_view ReportCss();
std::string_view ReportJs();

}  // namespace neuromkl::exporting::resources
