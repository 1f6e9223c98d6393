// Terminal control codes out of text: what a terminal would act on rather than print. Rendered
// manual pages, fortune files and logs carry ANSI colour codes ("\x1b[33;1m*\x1b[;m"), cursor
// moves, backspace overstrikes ("b\bbo\bol\bld" for bold) and stray control bytes; a model trained
// on them learns "[33;1m" as text.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace smelt {

struct TerminalStrip {
  size_t sequences = 0;  // escape sequences, overstrikes and control characters removed
  size_t bytes = 0;      // bytes removed
};

// Removes, in one pass:
// - ESC sequences: CSI (ESC [ parameters intermediates final, e.g. colours and cursor moves),
//   OSC and the other string commands (ESC ] / P / X / ^ / _ up to BEL or ESC \, never past a
//   newline), and the short ones (ESC, intermediates 0x20-0x2F, one final 0x30-0x7E);
// - the 8-bit CSI U+009B with its parameters, and the other C1 controls U+0080-U+009F;
// - backspace with the character before it (an overstrike keeps the character printed last:
//   "_\bx" and "x\bx" are "x"); a backspace at a line's start is dropped alone;
// - the other C0 controls and DEL, except tab, newline, vertical tab, form feed and carriage return.
// Everything else, invalid UTF-8 included, is copied as it is. Text without control codes comes
// back unchanged (and untouched: nothing is copied).
TerminalStrip strip_terminal_codes(std::string& text);

}  // namespace smelt
