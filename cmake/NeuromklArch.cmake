# The instruction set neuromkl is compiled for (NEUROMKL_ARCH). The learners' fits are bound by
# floating-point arithmetic in cache-resident loops (SMO, kernel combination and quadratics, Eigen's products and
# factorisations): compiled for x86-64-v3 (AVX2 and FMA, processors since 2013-2015), the ENMKL nested-CV benchmark
# runs about 1.3x faster than for baseline x86-64 (docs/learners.md, "The instruction set").
#   auto     (default) x86-64-v3 when the compiler accepts it and this machine runs code built for it, else the
#            compiler's default. A binary built so runs only on processors with x86-64-v3.
#   default  the compiler's default (baseline x86-64 on Debian): a binary to copy to other machines, e.g. a cluster
#            whose nodes are older than the machine that builds.
#   VALUE    -march=VALUE (e.g. x86-64-v3, native, znver3).
# Results differ between instruction sets at the level of rounding (Eigen's kernels use FMA, which rounds a product
# and a sum once, and sum in another order); within one build they do not depend on the number of threads.
# NEUROMKL_ARCH_NAME is what was chosen: `neuromkl --version` prints it and results.json records it.
set(NEUROMKL_ARCH "auto" CACHE STRING "Instruction set: auto (x86-64-v3 when this machine runs it), default (the compiler's), or a -march value")

set(NEUROMKL_ARCH_NAME "default")
if(NEUROMKL_ARCH STREQUAL "auto")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND NOT CMAKE_CROSSCOMPILING)
    # A program built with the flag must run here: an older processor stops it with an illegal instruction.
    set(_probe "${CMAKE_BINARY_DIR}/CMakeFiles/neuromkl_arch_probe.cpp")
    file(WRITE "${_probe}" "#include <cstdio>\n#include <cstdlib>\n"
         "int main(int argc, char**) { double a[64], s = 0; for (int i = 0; i < 64; ++i) a[i] = std::atof(\"1.5\") * (i + argc);\n"
         "  for (int i = 0; i < 64; ++i) s += a[i] * a[i]; std::printf(\"%g\", s); return s > 0 ? 0 : 1; }\n")
    try_run(_run _compile "${CMAKE_BINARY_DIR}/CMakeFiles/neuromkl_arch_probe" "${_probe}"
            COMPILE_DEFINITIONS -march=x86-64-v3 COMPILE_OUTPUT_VARIABLE _compile_out RUN_OUTPUT_VARIABLE _run_out)
    if(_compile AND _run EQUAL 0)
      set(NEUROMKL_ARCH_NAME "x86-64-v3")
    endif()
  endif()
elseif(NOT NEUROMKL_ARCH STREQUAL "default")
  set(NEUROMKL_ARCH_NAME "${NEUROMKL_ARCH}")
endif()

if(NOT NEUROMKL_ARCH_NAME STREQUAL "default")
  add_compile_options(-march=${NEUROMKL_ARCH_NAME})
endif()
# No contraction of a * b + c into one FMA at the compiler's choice: it would contract one inlined copy of a formula
# and not another, and paths that must agree bit for bit (a fold's summed kernel and the sum of its prepared copies,
# kernels read in place or copied) would not. Eigen's explicit FMA in its own kernels stays.
add_compile_options(-ffp-contract=off)
if(NEUROMKL_ARCH_NAME STREQUAL "default")
  message(STATUS "neuromkl: instruction set: the compiler's default (NEUROMKL_ARCH=${NEUROMKL_ARCH})")
else()
  message(STATUS "neuromkl: instruction set ${NEUROMKL_ARCH_NAME} (NEUROMKL_ARCH=${NEUROMKL_ARCH}; -DNEUROMKL_ARCH=default for a binary that runs on any x86-64)")
endif()
