#pragma once
#include <string>
namespace neuromkl::kernels {
void UseSingleThreadedBlas();
std::string BlasConfig();
}  // namespace neuromkl::kernels
