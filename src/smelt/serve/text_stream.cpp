// TextStream: hold back the bytes of an unfinished UTF-8 character until a later token completes
// it. Not the tokenizer's decode (which concatenates raw token bytes).
#include "smelt/serve/text_stream.hpp"

#include "smelt/common/utf8.hpp"

namespace smelt {

size_t utf8_incomplete_tail(const std::string& s) {
  const size_t n = s.size();
  // Look back over up to 3 continuation bytes for the lead byte of the last character.
  for (size_t back = 1; back <= 4 && back <= n; back++) {
    const unsigned char c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes: invalid, nothing to wait for
}

std::string TextStream::push(uint32_t id) {
  tok_.decode(&id, 1, pending_);
  const size_t hold = utf8_incomplete_tail(pending_);
  std::string out;
  utf8_repair_append(std::string_view(pending_).substr(0, pending_.size() - hold), out);
  pending_.erase(0, pending_.size() - hold);
  text_ += out;
  return out;
}

std::string TextStream::finish() {
  std::string out;
  utf8_repair_append(pending_, out);
  pending_.clear();
  text_ += out;
  return out;
}

}  // namespace smelt
