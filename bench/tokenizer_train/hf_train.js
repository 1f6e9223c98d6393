// Hugging Face's BPE trainer (npm `tokenizers`, installed in tests/reference by scripts/install-deps)
// with the GPT-2 byte-level pre-tokenizer, for bench/tokenizer_train/run.
//   node hf_train.js OUT.json FILE...
// The node binding exposes no trainer options: train() uses the model's default BpeTrainer
// (vocab_size 30000, min_frequency 0, no special tokens), reading the files line by line.
const path = require('path');
const t = require(path.join(__dirname, '..', '..', 'tests', 'reference', 'node_modules', 'tokenizers'));
const [out, ...files] = process.argv.slice(2);
const tk = new t.Tokenizer(t.BPE.empty());
tk.setPreTokenizer(t.byteLevelPreTokenizer(false, true));
tk.train(files);
tk.save(out);
