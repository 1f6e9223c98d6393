// libFuzzer target for the document readers: the input (after its first byte) is written to a temp
// file whose name the first byte picks (.warc, .jsonl, .txt, .html, .warc.gz, .jsonl.zst, ...), then
// a DocReader drains it. Not a test of results: it only looks for crashes, hangs and leaks.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "smelt/text/doc_reader.hpp"

namespace {

const char* const kNames[] = {"in.warc", "in.jsonl", "in.txt", "in.html", "in.warc.gz", "in.jsonl.zst", "in"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const std::string dir = "/tmp/smelt-fuzz-readers-" + std::to_string(::getpid());
  static bool made = false;
  if (!made) { ::mkdir(dir.c_str(), 0700); made = true; }
  const std::string path = dir + "/" + kNames[sel % 7];
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);

  smelt::ReaderOptions opt;
  // Small limits reach the skip paths; the other bits of the selector pick the text unit.
  opt.max_record_bytes = (sel & 0x80) ? 64 : 4096;
  opt.text_unit = (sel / 7) % 3 == 0   ? smelt::TextUnit::kFile
                 : (sel / 7) % 3 == 1 ? smelt::TextUnit::kParagraph
                                      : smelt::TextUnit::kLine;
  smelt::Status err;
  auto reader = smelt::doc_reader_open(path, opt, err);
  if (reader) {
    uint64_t issues = 0;
    reader->on_issue = [&](const smelt::ReadIssue& i) { issues += i.message.size() > 0; };
    smelt::RawDoc doc;
    while (reader->next(doc)) {
      // repair may triple invalid bytes (U+FFFD), nothing else may exceed the limit
      if (doc.text.size() > 3 * opt.max_record_bytes) __builtin_trap();
    }
    (void)reader->bytes_read();
  }
  std::remove(path.c_str());
  return 0;
}
