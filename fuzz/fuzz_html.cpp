// libFuzzer target: charset_to_utf8 (declared charset taken from the first input byte) then
// html_extract in both modes, on arbitrary bytes. Not a correctness test: it looks for crashes,
// ASan reports and invalid UTF-8 output.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "smelt/common/utf8.hpp"
#include "smelt/text/charset.hpp"
#include "smelt/text/html_extract.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kCharsets[] = {"", "utf-8", "gbk", "big5", "gb18030", "windows-1252",
                                          "shift_jis", "utf-16le", "x-unknown"};
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view charset = kCharsets[size ? data[0] % 9 : 0];
  std::string utf8;
  smelt::charset_to_utf8(in, charset, utf8);
  if (!smelt::utf8_valid(utf8)) std::abort();
  smelt::HtmlExtractResult r;
  for (bool remove : {true, false}) {
    smelt::HtmlExtractOptions opt;
    opt.remove_boilerplate = remove;
    opt.keep_title = remove;
    smelt::html_extract(utf8, opt, r);
    if (!smelt::utf8_valid(r.text) || !smelt::utf8_valid(r.title)) std::abort();
  }
  // the extractor must also survive bytes that are not UTF-8
  smelt::html_extract(in, smelt::HtmlExtractOptions{}, r);
  return 0;
}
