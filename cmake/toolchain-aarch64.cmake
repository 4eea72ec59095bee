# Cross-compiling for 64-bit ARM Linux on a Debian x86-64 host: Debian's cross compilers
# (crossbuild-essential-arm64) against Debian's multiarch arm64 packages (libfoo-dev:arm64, which
# install into /usr/lib/aarch64-linux-gnu beside the host's /usr/lib/x86_64-linux-gnu).
# scripts/arm64.sh installs all of it and uses this file:
#   cmake -S . -B build-arm64 -G Ninja --toolchain cmake/toolchain-aarch64.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: find_library/find_package look in lib/aarch64-linux-gnu under each prefix, so /usr
# serves both architectures. The root path adds the cross toolchain's own libc and libstdc++.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# GCC notes on aarch64 that GCC 10.1 changed how some std::pair arguments are passed: irrelevant
# when one compiler builds everything, and noise in every build log.
set(CMAKE_CXX_FLAGS_INIT -Wno-psabi)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
# glslangValidator and spirv-val are host programs; libraries, headers and CMake packages must be
# the target's (arch-independent header-only packages such as CLI11 and nlohmann_json live under
# /usr/share and /usr/include, shared by both architectures).
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config (PCRE2, cpp-httplib, libedit) reads only the arm64 .pc files and the arch-independent
# ones; the host's x86-64 .pc files would hand out x86-64 libraries.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# Target programs run under user-mode emulation: the build-time tool shader_embed (add_custom_command
# prefixes the emulator to an executable target) and every test (add_test does too). Emulating
# shader_embed rather than building a host copy keeps one build tree and one toolchain (a host
# copy needs a second, native CMake project), costs a second of emulation per build, and runs the
# SPIR-V reflection on the target too. qemu finds the arm64 loader and libraries in their multiarch
# folders (libc6:arm64 installs /lib/ld-linux-aarch64.so.1), so no -L sysroot is needed.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
