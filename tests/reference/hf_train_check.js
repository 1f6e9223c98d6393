// Trains Hugging Face's BPE trainer (npm `tokenizers`, its default BpeTrainer) on files and writes
// the tokenizer.json, so tests can compare its merges with Smelt's trainer.
//   node hf_train_check.js whitespace|bytelevel OUT.json FILE...
//   node hf_train_check.js encode TOKENIZER.json TEXTFILE   (prints the ids of the file's text as JSON)
// whitespace: HF's WhitespaceSplit pre-tokenizer (pieces = runs of non-whitespace; for ASCII text
// the same words as the test's splitter). bytelevel: ByteLevel(add_prefix_space=false) (GPT-2 regex).
// The default trainer: vocab_size 30000, min_frequency 0, no special tokens, alphabet = characters seen.
const path = require('path');
const t = require(path.join(__dirname, 'node_modules', 'tokenizers'));

const [mode, out, ...files] = process.argv.slice(2);
if (mode === 'encode') {
  const fs = require('fs');
  const tok = t.Tokenizer.fromFile(out);
  tok.encode(fs.readFileSync(files[0], 'utf8'), null, {addSpecialTokens: false}).then((e) => {
    process.stdout.write(JSON.stringify(e.getIds()) + '\n');
  });
  return;
}
const tk = new t.Tokenizer(t.BPE.empty());
if (mode === 'whitespace') tk.setPreTokenizer(t.whitespaceSplitPreTokenizer());
else if (mode === 'bytelevel') tk.setPreTokenizer(t.byteLevelPreTokenizer(false, true));
else throw new Error('mode: whitespace | bytelevel');
tk.train(files);
tk.save(out);
