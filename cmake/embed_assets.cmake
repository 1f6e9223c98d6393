# Writes a C++ file that holds files as byte arrays: the dashboard page's assets (web/ and
# third_party/uplot/), built into the binary so `smelt dashboard` and `smelt report` read nothing
# from disk or the network. Run at build time by the custom command in CMakeLists.txt:
#   cmake -DOUT=FILE.cpp -DROOT=SOURCE_DIR -DFILES="NAME=PATH|NAME=PATH|..." -P embed_assets.cmake
# PATH is relative to ROOT; NAME is what src/smelt/obs/dashboard_assets.hpp's lookup takes.
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" entries "${FILES}")
set(arrays "")
set(table "")
set(i 0)
foreach(entry IN LISTS entries)
  string(FIND "${entry}" "=" eq)
  string(SUBSTRING "${entry}" 0 ${eq} name)
  math(EXPR from "${eq} + 1")
  string(SUBSTRING "${entry}" ${from} -1 path)
  file(SIZE "${ROOT}/${path}" size)
  file(READ "${ROOT}/${path}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x..,){24})" "\\1\n" bytes "${bytes}")
  # a trailing NUL (not counted in the size): no empty array, and the text ends like a C string
  string(APPEND arrays "// ${path}\nconst unsigned char a${i}[] = {\n${bytes}0x00};\n")
  string(APPEND table "    {\"${name}\", a${i}, ${size}},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated at build time by cmake/embed_assets.cmake from the files named below; do not edit.
#include \"smelt/obs/dashboard_assets.hpp\"

namespace smelt {
namespace {
${arrays}
constexpr DashboardAsset kAssets[] = {
${table}};
}  // namespace

std::span<const DashboardAsset> dashboard_assets() { return kAssets; }

}  // namespace smelt
")
file(RENAME "${OUT}.tmp" "${OUT}")
